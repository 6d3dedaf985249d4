"""KEDA objects, against our own field schema read from KEDA's CRDs and scaler code, and
against the workers: the Deployment scaled, the stream, the group, the replica arithmetic."""

import json
import math
import os
import re
import tomllib

import jsonschema

from deploycheck.files import (
    KEDA_API, config_toml, flag_value, k8s_objects, kustomization, name_of, of_kind,
    plan_threads, role_deployment,
)



def check_keda(root, expected, r):
    objects = k8s_objects(root)
    kust = kustomization(root)
    with open(os.path.join(root, "tests/python/keda_fields.schema.json")) as f:
        schema = json.load(f)
    for name, o in objects:
        if o.get("apiVersion") != KEDA_API:
            continue
        kind = o.get("kind")
        where = f"{name} {kind}/{name_of(o)}"
        if not r.check(kind in schema["$defs"], where, f"kind {kind} is not in our KEDA schema"):
            continue
        sub = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": f"#/$defs/{kind}"}
        for e in jsonschema.Draft202012Validator(sub).iter_errors(o):
            path = ".".join(str(p) for p in e.absolute_path)
            r.errors.append(f"{where}: KEDA v2.20 fields: {path}: {e.message}")

    sos = of_kind(objects, "ScaledObject")
    if not r.check(len(sos) == 1, "deploy/k8s", "needs exactly one ScaledObject"):
        return
    f, so = sos[0]
    where = f"{f} ScaledObject/{name_of(so)}"
    spec = so["spec"]
    wf, wd, wc = role_deployment(objects, "worker")
    if not r.check(wd is not None, where, "no worker Deployment to scale"):
        return
    r.check(spec["scaleTargetRef"]["name"] == name_of(wd), where,
            f"scales {spec['scaleTargetRef']['name']}, not the worker Deployment {name_of(wd)}")
    r.check(spec.get("minReplicaCount", 1) <= spec.get("maxReplicaCount", 100), where,
            "minReplicaCount above maxReplicaCount")
    r.check(spec.get("minReplicaCount") == 0, where, "minReplicaCount must be 0 (scale to zero)")

    concurrency = int(flag_value(wc["args"], "--concurrency") or 32)
    toml_text, _ = config_toml(objects, wc, wd)
    threads = plan_threads(toml_text or "")
    if r.check(threads is not None, where, "the workers' config has no [[accounts]] threads"):
        want = math.ceil(threads / concurrency)
        r.check(spec.get("maxReplicaCount") == want, where,
                f"maxReplicaCount {spec.get('maxReplicaCount')} must be ceil(plan threads"
                f" {threads} / --concurrency {concurrency}) = {want}")
        for _, hpa in of_kind(objects, "HorizontalPodAutoscaler"):
            hwhere = f"HorizontalPodAutoscaler/{name_of(hpa)}"
            r.check(hpa["spec"].get("maxReplicas") == want, hwhere,
                    f"maxReplicas must be {want}, as the ScaledObject's")
            r.check(hpa["spec"]["scaleTargetRef"]["name"] == name_of(wd), hwhere,
                    "does not scale the worker Deployment")
            r.check(hpa["spec"].get("minReplicas", 1) >= 1, hwhere,
                    "minReplicas 0 needs the alpha HPAScaleToZero gate: use KEDA for that")
            r.check(all(m["type"] == "External" for m in hpa["spec"]["metrics"]), hwhere,
                    "scales on an External metric (the queue lag)")
            for m in hpa["spec"]["metrics"]:
                labels = m.get("external", {}).get("metric", {}).get("selector", {})
                r.check(labels.get("matchLabels", {}).get("queue") == expected["queue"], hwhere,
                        f"the metric's queue label must be {expected['queue']}")

    retry_cap = tomllib.loads(toml_text or "").get("queue", {}).get(
        "retry_cap_s", expected["retry_cap_s"])
    r.check(spec.get("cooldownPeriod", 300) > retry_cap, where,
            f"cooldownPeriod {spec.get('cooldownPeriod', 300)} must exceed the longest retry delay"
            f" {retry_cap} s: a task waiting in the retry set is seen by no trigger")

    services = {name_of(o): o for _, o in of_kind(objects, "Service")}
    auths = {name_of(o): o for _, o in of_kind(objects, "TriggerAuthentication")}
    namespace = kust.get("namespace")
    modes = []
    for i, t in enumerate(spec["triggers"]):
        twhere = f"{where} trigger {t.get('name', i)}"
        meta = t["metadata"]
        r.check(meta.get("stream") == expected["stream"], twhere,
                f"stream {meta.get('stream')!r}: the workers read {expected['stream']!r}")
        r.check(meta.get("consumerGroup") == expected["group"], twhere,
                f"consumerGroup {meta.get('consumerGroup')!r}: the workers' group is"
                f" {expected['group']!r}")
        address = meta.get("address", "")
        host, _, port = address.rpartition(":")
        svc_name = host.split(".")[0]
        svc = services.get(svc_name)
        if r.check(svc is not None, twhere, f"address {address}: no Service {svc_name}"):
            r.check(host == f"{svc_name}.{namespace}.svc.cluster.local", twhere,
                    f"address host {host}: KEDA runs in its own namespace, so it must be"
                    f" {svc_name}.{namespace}.svc.cluster.local (kustomization.yaml's namespace)")
            r.check(port.isdigit() and int(port) in [p["port"] for p in svc["spec"]["ports"]],
                    twhere, f"address port {port} is not the Service's")
        worker_url = next((e.get("value", "") for e in wc.get("env", [])
                           if e["name"] == "REDIS_URL"), "")
        worker_db = re.search(r"/(\d+)$", worker_url)
        db = worker_db.group(1) if worker_db else "0"
        r.check(meta.get("databaseIndex", "0") == db, twhere,
                f"databaseIndex {meta.get('databaseIndex', '0')} is not the workers' database {db}")
        ref = t.get("authenticationRef", {}).get("name")
        r.check(ref in auths, twhere, f"authenticationRef {ref} is no TriggerAuthentication here")
        if "lagCount" in meta:
            modes.append("lag")
            r.check(int(meta["lagCount"]) == concurrency, twhere,
                    f"lagCount {meta['lagCount']} should be the workers' --concurrency {concurrency}")
        elif "pendingEntriesCount" in meta:
            modes.append("pending")
            r.check(int(meta["pendingEntriesCount"]) == concurrency, twhere,
                    f"pendingEntriesCount should be the workers' --concurrency {concurrency}")
    r.check("lag" in modes, where,
            "no trigger with lagCount: only the lag can wake workers from zero replicas")
