"""Offline checks of the deployment files (deploy/k8s, compose.yaml, Dockerfile): run by
tests/it/deploy.rs, which passes the values every part must agree on.

    validate_deploy.py ROOT SECTION EXPECTED_JSON

SECTION is one of k8s, keda, compose, docker, facts. Prints one JSON object: `errors` (a list of
"file: what is wrong" lines, empty when all is well) and, for `facts`, what the Rust side checks
against the binary itself (the command lines and the TOML files the containers get).
"""

import json
import math
import os
import re
import sys
import tomllib

import jsonschema
import kubernetes_validate
import yaml

# Kubernetes versions every object must validate against (strict: no unknown field): the oldest
# the manifests support (preStop `sleep` is on by default from 1.30) and the newest schema that
# the pinned kubernetes-validate ships.
KUBERNETES_VERSIONS = ["1.30.0", "1.37.0"]

KEDA_API = "keda.sh/v1alpha1"
GATEWAY_IMAGE = "captcha-gateway"
# Files in deploy/k8s that are not applied by default, and why: the autoscaler for clusters
# without KEDA replaces keda.yaml.
NOT_IN_KUSTOMIZATION = {"hpa-external.yaml"}


class Report:
    def __init__(self):
        self.errors = []

    def check(self, ok, where, message):
        if not ok:
            self.errors.append(f"{where}: {message}")
        return ok


def load_yaml_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def k8s_objects(root):
    """Every object under deploy/k8s (but the kustomization), as (file name, object)."""
    folder = os.path.join(root, "deploy/k8s")
    out = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".yaml") and name != "kustomization.yaml":
            out.extend((name, d) for d in load_yaml_docs(os.path.join(folder, name)))
    return out


def kustomization(root):
    return load_yaml_docs(os.path.join(root, "deploy/k8s/kustomization.yaml"))[0]


def read_text(root, path, r):
    full = os.path.join(root, path)
    if r.check(os.path.isfile(full), path, "does not exist"):
        return open(full).read()
    return ""


def of_kind(objects, kind):
    return [(f, o) for f, o in objects if o.get("kind") == kind]


def name_of(obj):
    return obj.get("metadata", {}).get("name", "?")


def flag_value(argv, flag):
    """The value of `--flag=value` or `--flag value` in argv, or None."""
    for i, arg in enumerate(argv):
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


def redact(url):
    """A URL fit for a report: a password in it is replaced, never echoed."""
    return re.sub(r"^([a-z]+://[^:@/]*:)[^@/]*@", r"\1***@", url)


def port_of(addr):
    return int(addr.rsplit(":", 1)[1]) if addr and ":" in addr else None


def pod_spec(deployment):
    return deployment["spec"]["template"]["spec"]


def gateway_containers(objects):
    """(file, deployment, container) for every container running our image."""
    out = []
    for f, d in of_kind(objects, "Deployment"):
        for c in pod_spec(d)["containers"]:
            if c.get("image", "").split(":")[0] == GATEWAY_IMAGE:
                out.append((f, d, c))
    return out


def role_deployment(objects, subcommand):
    """The one Deployment whose container runs `captcha-gateway <subcommand>`."""
    found = [(f, d, c) for f, d, c in gateway_containers(objects)
             if c.get("args", [None])[0] == subcommand]
    return found[0] if len(found) == 1 else (None, None, None)


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def config_toml(objects, container, deployment):
    """The TOML a container reads with --config: the ConfigMap key its volume mounts there."""
    path = flag_value(container.get("args", []), "--config")
    if path is None:
        return None, "no --config"
    for mount in container.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(prefix):
            continue
        volume = next((v for v in pod_spec(deployment).get("volumes", [])
                       if v["name"] == mount["name"]), None)
        if volume is None or "configMap" not in volume:
            return None, f"{path} is not on a ConfigMap volume"
        cm_name = volume["configMap"]["name"]
        cms = [o for _, o in of_kind(objects, "ConfigMap") if name_of(o) == cm_name]
        if not cms:
            return None, f"ConfigMap {cm_name} is not in deploy/k8s"
        key = path[len(prefix):]
        if key not in cms[0].get("data", {}):
            return None, f"ConfigMap {cm_name} has no key {key}"
        return cms[0]["data"][key], None
    return None, f"--config {path} is not under any volume mount"


def plan_threads(toml_text):
    accounts = tomllib.loads(toml_text).get("accounts", [])
    return sum(a.get("threads", 0) for a in accounts) if accounts else None


# ---------------------------------------------------------------------------------------------
# Kubernetes objects


def check_k8s(root, expected, r):
    objects = k8s_objects(root)
    kust = kustomization(root)

    for f, o in objects:
        where = f"{f} {o.get('kind')}/{name_of(o)}"
        if o.get("apiVersion") == KEDA_API:
            continue  # our own field schema: the `keda` section
        r.check("namespace" not in o.get("metadata", {}), where,
                "carries a namespace: the kustomization places every object")
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(o, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                r.errors.append(f"{where}: Kubernetes {version} schema: {path}: {e.message}")
            except (kubernetes_validate.SchemaNotFoundError,
                    kubernetes_validate.InvalidSchemaError) as e:
                r.errors.append(f"{where}: no Kubernetes {version} schema: {e.message}")
        r.check(o.get("kind") != "Secret", where,
                "a Secret is never committed: docs/DEPLOY.md creates it with kubectl")

    check_kustomization(root, kust, r)
    check_selectors(objects, r)
    check_containers(objects, expected, r)
    check_secrets_documented(root, objects, expected, r)
    check_redis(objects, r)


def check_kustomization(root, kust, r):
    folder = os.path.join(root, "deploy/k8s")
    files = {n for n in os.listdir(folder) if n.endswith(".yaml")} - {"kustomization.yaml"}
    listed = kust.get("resources", [])
    r.check(len(listed) == len(set(listed)), "kustomization.yaml", "a resource listed twice")
    for name in listed:
        r.check(name in files, "kustomization.yaml", f"lists {name}, which does not exist")
    for name in sorted(files - set(listed)):
        r.check(name in NOT_IN_KUSTOMIZATION, "kustomization.yaml",
                f"does not list {name}: add it to resources")
    for name in NOT_IN_KUSTOMIZATION:
        r.check(name not in listed, "kustomization.yaml",
                f"lists {name}, the alternative for clusters without KEDA")
    r.check(bool(kust.get("namespace")), "kustomization.yaml", "sets no namespace")
    images = [i.get("name") for i in kust.get("images", [])]
    r.check(GATEWAY_IMAGE in images, "kustomization.yaml",
            f"has no images entry for {GATEWAY_IMAGE} to point it at a registry")


def check_selectors(objects, r):
    deployments = of_kind(objects, "Deployment")
    for f, d in deployments:
        where = f"{f} Deployment/{name_of(d)}"
        sel = d["spec"]["selector"].get("matchLabels", {})
        r.check(selects(sel, d["spec"]["template"]["metadata"].get("labels", {})), where,
                "its selector does not match its own pod labels")
        for _, other in deployments:
            if other is not d:
                r.check(not selects(sel, other["spec"]["template"]["metadata"].get("labels", {})),
                        where, f"its selector also matches Deployment/{name_of(other)}'s pods")
    for kind in ("Service", "PodDisruptionBudget"):
        for f, o in of_kind(objects, kind):
            where = f"{f} {kind}/{name_of(o)}"
            sel = o["spec"]["selector"]
            sel = sel.get("matchLabels", {}) if kind == "PodDisruptionBudget" else sel
            targets = [d for _, d in deployments
                       if selects(sel, d["spec"]["template"]["metadata"].get("labels", {}))]
            if not r.check(len(targets) == 1, where,
                           f"selects the pods of {len(targets)} Deployments, not exactly one"):
                continue
            if kind == "Service":
                check_service_ports(where, o, targets[0], r)
    for role in ("serve", "worker"):
        f, d, _ = role_deployment(objects, role)
        if d is None:
            continue
        pdbs = [o for _, o in of_kind(objects, "PodDisruptionBudget")
                if selects(o["spec"]["selector"].get("matchLabels", {}),
                           d["spec"]["template"]["metadata"].get("labels", {}))]
        r.check(len(pdbs) == 1, f"{f} Deployment/{name_of(d)}",
                "needs exactly one PodDisruptionBudget")


def check_service_ports(where, service, deployment, r):
    ports = [p for c in pod_spec(deployment)["containers"] for p in c.get("ports", [])]
    for sp in service["spec"]["ports"]:
        target = sp.get("targetPort", sp["port"])
        match = [p for p in ports if p.get("name") == target or p["containerPort"] == target]
        if r.check(bool(match), where, f"targetPort {target} is no containerPort of "
                   f"Deployment/{name_of(deployment)}"):
            r.check(match[0]["containerPort"] == sp["port"], where,
                    f"port {sp['port']} forwards to containerPort {match[0]['containerPort']}:"
                    " keep them equal so in-cluster and local addresses agree")


def env_names_before(container, index):
    return {e["name"] for e in container.get("env", [])[:index]}


def check_env_references(where, container, r):
    """`$(VAR)` is expanded by the kubelet only from variables defined before it."""
    env = container.get("env", [])
    for i, e in enumerate(env):
        for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", e.get("value", "")):
            r.check(ref in env_names_before(container, i), where,
                    f"env {e['name']} uses $({ref}), not defined before it")
    for arg in container.get("args", []) + container.get("command", []):
        for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", arg):
            r.check(ref in {x["name"] for x in env}, where, f"args use $({ref}), not in env")


def check_probes(where, container, r, http_paths):
    ports = container.get("ports", [])
    names = {p.get("name") for p in ports} | {p["containerPort"] for p in ports}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        spec = container.get(probe)
        if spec is None:
            continue
        handler = spec.get("httpGet") or spec.get("tcpSocket")
        if r.check(handler is not None, where, f"{probe} is neither httpGet nor tcpSocket"):
            r.check(handler["port"] in names, where,
                    f"{probe} port {handler['port']} is no containerPort")
    for probe, path in http_paths.items():
        got = container.get(probe, {}).get("httpGet", {}).get("path")
        r.check(got == path, where, f"{probe} must be GET {path} (got {got})")


def check_security(where, deployment, container, r):
    pod = pod_spec(deployment).get("securityContext", {})
    ctx = container.get("securityContext", {})
    r.check(pod.get("runAsNonRoot") is True or ctx.get("runAsNonRoot") is True, where,
            "runAsNonRoot is not set")
    uid = ctx.get("runAsUser", pod.get("runAsUser"))
    r.check(isinstance(uid, int) and uid > 0, where, f"runAsUser {uid}: a numeric non-root user")
    r.check(ctx.get("allowPrivilegeEscalation") is False, where,
            "allowPrivilegeEscalation must be false")
    r.check(ctx.get("readOnlyRootFilesystem") is True, where,
            "readOnlyRootFilesystem must be true")
    r.check("ALL" in ctx.get("capabilities", {}).get("drop", []), where,
            "capabilities must drop ALL")
    res = container.get("resources", {})
    for need in ("cpu", "memory"):
        r.check(need in res.get("requests", {}), where, f"no {need} request")
    r.check("memory" in res.get("limits", {}), where, "no memory limit")


def check_containers(objects, expected, r):
    for f, d in of_kind(objects, "Deployment"):
        for c in pod_spec(d)["containers"]:
            where = f"{f} Deployment/{name_of(d)} container {c['name']}"
            check_env_references(where, c, r)
            check_security(where, d, c, r)
    roles = {"serve": "gateway_port", "worker": "worker_port"}
    redis_services = {name_of(o): o for _, o in of_kind(objects, "Service")
                      if any(p.get("name") == "redis" for p in o["spec"]["ports"])}
    for role, port_key in roles.items():
        f, d, c = role_deployment(objects, role)
        if not r.check(c is not None, "deploy/k8s",
                       f"exactly one Deployment must run `captcha-gateway {role}`"):
            continue
        where = f"{f} Deployment/{name_of(d)}"
        argv = c["args"]
        listen = flag_value(argv, "--listen")
        r.check(port_of(listen) == expected[port_key], where,
                f"--listen {listen}: the contract's port is {expected[port_key]}")
        r.check(listen is not None and listen.startswith("0.0.0.0:"), where,
                "--listen must take every address of the pod (0.0.0.0)")
        ports = [p["containerPort"] for p in c.get("ports", [])]
        r.check(ports == [expected[port_key]], where,
                f"containerPorts {ports}: the contract's port is {expected[port_key]}")
        check_probes(where, c, r, {"livenessProbe": "/livez", "readinessProbe": "/readyz"})
        queue = flag_value(argv, "--queue")
        r.check(queue == expected["queue"], where,
                f"--queue {queue}: the workers' queue is {expected['queue']}")
        toml_text, problem = config_toml(objects, c, d)
        r.check(problem is None, where, f"--config: {problem}")
        env = {e["name"]: e for e in c.get("env", [])}
        r.check("REDIS_URL" in env, where, "no REDIS_URL")
        url = env.get("REDIS_URL", {}).get("value", "")
        m = re.match(r"^rediss?://(?:[^@/]*@)?([^:/]+):(\d+)(/\d+)?$", url)
        if r.check(m is not None, where, f"REDIS_URL {redact(url)!r} is not redis://[:pw@]host:port/db"):
            svc = redis_services.get(m.group(1))
            if r.check(svc is not None, where, f"REDIS_URL host {m.group(1)} is no Redis Service"):
                r.check(int(m.group(2)) in [p["port"] for p in svc["spec"]["ports"]], where,
                        f"REDIS_URL port {m.group(2)} is not the Service's")
        userinfo = url.split("//", 1)[-1].split("@")[0] if "@" in url else ""
        password = userinfo.partition(":")[2]
        r.check(password == "" or re.fullmatch(r"\$\([A-Za-z_][A-Za-z0-9_]*\)", password), where,
                "REDIS_URL holds a literal password: reference the Secret's variable")
        grace = pod_spec(d).get("terminationGracePeriodSeconds", 30)
        if role == "worker":
            worker_grace = flag_value(argv, "--grace-s")
            if r.check(worker_grace is not None, where, "no --grace-s"):
                r.check(grace > float(worker_grace), where,
                        f"terminationGracePeriodSeconds {grace} must exceed --grace-s"
                        f" {worker_grace}, or the kubelet kills a worker still finishing")
            r.check("replicas" not in d["spec"], where,
                    "sets replicas, which the autoscaler owns (every apply would reset it)")
        else:
            pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
            shutdown = tomllib.loads(toml_text or "").get("shutdown_grace_s", 10)
            r.check(grace > pre_stop + shutdown, where,
                    f"terminationGracePeriodSeconds {grace} must exceed the preStop sleep"
                    f" {pre_stop} s plus shutdown_grace_s {shutdown} s")


def check_secrets_documented(root, objects, expected, r):
    """Every Secret a pod references is one docs/DEPLOY.md creates, with that key."""
    secrets = expected["secrets"]
    used = set()
    for f, d in of_kind(objects, "Deployment"):
        for c in pod_spec(d)["containers"]:
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    used.add((ref["name"], ref["key"]))
                    r.check(ref["key"] in secrets.get(ref["name"], []),
                            f"{f} Deployment/{name_of(d)}",
                            f"secret {ref['name']}/{ref['key']} is not one docs/DEPLOY.md creates")
    for f, ta in of_kind(objects, "TriggerAuthentication"):
        for ref in ta["spec"].get("secretTargetRef", []):
            used.add((ref["name"], ref["key"]))
            r.check(ref["key"] in secrets.get(ref["name"], []),
                    f"{f} TriggerAuthentication/{name_of(ta)}",
                    f"secret {ref['name']}/{ref['key']} is not one docs/DEPLOY.md creates")
    docs = read_text(root, "docs/DEPLOY.md", r)
    for name, keys in secrets.items():
        for key in keys:
            if (name, key) in used:
                pattern = rf"kubectl -n \S+ create secret generic {re.escape(name)}[^\n]*--from-literal={re.escape(key)}="
                r.check(re.search(pattern, docs) is not None, "docs/DEPLOY.md",
                        f"has no `kubectl -n NS create secret generic {name} ... --from-literal={key}=`")
    readme = read_text(root, "README.md", r)
    r.check("create secret generic captcha-gateway-provider --from-literal=api-key=" in readme,
            "README.md", "has no line creating the provider key's Secret")
    r.check("docs/DEPLOY.md" in readme, "README.md", "does not point at docs/DEPLOY.md")


def check_redis(objects, r):
    found = [(f, d, c) for f, d in of_kind(objects, "Deployment")
             for c in pod_spec(d)["containers"] if c.get("image", "").startswith("redis:")]
    if not r.check(len(found) == 1, "deploy/k8s", "needs exactly one Redis container"):
        return
    f, d, c = found[0]
    where = f"{f} Deployment/{name_of(d)}"
    r.check(c["image"].startswith("redis:7"), where, "Redis 7 or later: KEDA's lag needs it")
    check_redis_args(where, c.get("command", []) + c.get("args", []), r)
    r.check(d["spec"].get("strategy", {}).get("type") == "Recreate", where,
            "a ReadWriteOnce volume needs strategy Recreate")


def check_redis_args(where, argv, r):
    for flag, value in (("--maxmemory-policy", "noeviction"), ("--appendonly", "yes"),
                        ("--appendfsync", "everysec")):
        got = flag_value(argv, flag)
        r.check(got == value, where, f"{flag} must be {value} (got {got})")


# ---------------------------------------------------------------------------------------------
# KEDA objects, against our own field schema read from KEDA's CRDs and scaler code


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


# ---------------------------------------------------------------------------------------------
# compose.yaml


def compose_services(root):
    with open(os.path.join(root, "compose.yaml")) as f:
        return yaml.safe_load(f).get("services", {})


def check_compose(root, expected, r):
    services = compose_services(root)
    where = "compose.yaml"
    for name in ("redis", "gateway", "worker", "simulator"):
        r.check(name in services, where, f"no service {name}")
    if r.errors:
        return
    redis = services["redis"]
    check_redis_args(f"{where} redis", redis.get("command", []), r)
    r.check(redis.get("image", "").startswith("redis:7"), f"{where} redis", "Redis 7 or later")

    role_port = {"gateway": ("serve", expected["gateway_port"]),
                 "worker": ("worker", expected["worker_port"]),
                 "simulator": ("simulate", None)}
    for name, (sub, port) in role_port.items():
        s = services[name]
        swhere = f"{where} {name}"
        argv = s.get("command", [])
        r.check(argv[:1] == [sub], swhere, f"must run `captcha-gateway {sub}`")
        r.check("build" in s, swhere, "must build the image from the Dockerfile")
        listen = flag_value(argv, "--listen")
        r.check(listen is not None and listen.startswith("0.0.0.0:"), swhere,
                "--listen must take every address of the container (0.0.0.0)")
        if port is not None:
            r.check(port_of(listen) == port, swhere, f"--listen {listen}: the contract says {port}")
            r.check(flag_value(argv, "--queue") == expected["queue"], swhere,
                    f"--queue must be {expected['queue']}")
            url = s.get("environment", {}).get("REDIS_URL", "")
            r.check(re.match(r"^redis://redis:6379(/\d+)?$", url) is not None, swhere,
                    f"REDIS_URL {redact(url)!r} must name the redis service")
            config = flag_value(argv, "--config")
            mounts = [v.split(":") for v in s.get("volumes", [])]
            mount = [m for m in mounts if len(m) >= 2 and m[1] == config]
            if r.check(len(mount) == 1, swhere, f"--config {config} is not mounted"):
                src = os.path.join(root, mount[0][0])
                if r.check(os.path.isfile(src), swhere, f"{mount[0][0]} does not exist"):
                    check_compose_provider(swhere, src, services, r)
            depends = s.get("depends_on", {})
            r.check(depends.get("redis", {}).get("condition") == "service_healthy", swhere,
                    "must wait for a healthy redis")
    gw = services["gateway"]
    published = [p for p in gw.get("ports", []) if str(p).endswith(f":{expected['gateway_port']}")]
    r.check(len(published) == 1, f"{where} gateway",
            f"must publish port {expected['gateway_port']}")
    r.check(all(str(p).startswith("127.0.0.1:") for p in published), f"{where} gateway",
            "publish on the host's loopback only: the default key is the README's demo key")
    worker = services["worker"]
    r.check(worker.get("deploy", {}).get("replicas") == 2, f"{where} worker", "2 replicas")
    stop = worker.get("stop_grace_period", "10s")
    grace = flag_value(worker.get("command", []), "--grace-s")
    r.check(grace is not None and seconds(stop) > float(grace), f"{where} worker",
            f"stop_grace_period {stop} must exceed --grace-s {grace}")


def check_compose_provider(where, toml_path, services, r):
    """The default provider is the simulator service, at the address it listens on."""
    accounts = tomllib.load(open(toml_path, "rb")).get("accounts", [])
    sim_listen = flag_value(services["simulator"].get("command", []), "--listen")
    urls = [a.get("base_url") for a in accounts]
    r.check(f"http://simulator:{port_of(sim_listen)}" in urls, where,
            f"no account at the simulator service (http://simulator:{port_of(sim_listen)}): {urls}")
    r.check(all("key" not in a for a in accounts), where, "a key written in the config file")


def seconds(duration):
    m = re.match(r"^(\d+)(ms|s|m)$", str(duration))
    if not m:
        return 0
    n, unit = int(m.group(1)), m.group(2)
    return n / 1000 if unit == "ms" else n * 60 if unit == "m" else n


# ---------------------------------------------------------------------------------------------
# Dockerfile


def dockerfile_instructions(root):
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = open(os.path.join(root, "Dockerfile")).read()
    out, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        word, _, rest = current.partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def dockerignore_included(root):
    """The paths an allow-list .dockerignore (`*` then `!path` lines) lets into the context."""
    lines = [l.strip() for l in open(os.path.join(root, ".dockerignore"))
             if l.strip() and not l.strip().startswith("#")]
    if not lines or lines[0] != "*":
        return None
    return [l[1:].rstrip("/") for l in lines[1:] if l.startswith("!")]


def included_by(path, allowed):
    return any(path == a or path.startswith(a + "/") for a in allowed)


def compiled_in_files(root):
    """Files the Rust build reads through include_str!/include_bytes!, relative to root."""
    found = set()
    for base in ("src", "balance/src"):
        for folder, _, files in os.walk(os.path.join(root, base)):
            for name in files:
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(folder, name)
                text = open(path).read()
                for m in re.finditer(r'include_(?:str|bytes)!\(\s*(?:concat!\(\s*)?"([^"]+)"', text):
                    target = os.path.normpath(os.path.join(folder, m.group(1)))
                    found.add(os.path.relpath(target, root))
    return found


def check_docker(root, expected, r):
    where = "Dockerfile"
    steps = dockerfile_instructions(root)
    froms = [(i, args) for i, (word, args) in enumerate(steps) if word == "FROM"]
    r.check(len(froms) >= 2, where, "must be multi-stage (a build stage and a runtime stage)")
    if not froms:
        return
    stages = [re.split(r"\s+as\s+", a, flags=re.I)[-1] for _, a in froms[:-1]]
    r.check(froms[0][1].split()[0].startswith("rust:1-bookworm"), where,
            "the build stage is rust:1-bookworm")
    last_start = froms[-1][0]
    final = steps[last_start:]
    users = [a for w, a in final if w == "USER"]
    if r.check(bool(users), where, "the runtime stage sets no USER"):
        user = users[-1].split(":")[0]
        r.check(user not in ("root", "0"), where, f"USER {users[-1]} is root")
        r.check(user.isdigit(), where,
                f"USER {users[-1]}: numeric, so Kubernetes can check runAsNonRoot")
    exposed = {p for w, a in final if w == "EXPOSE" for p in a.split()}
    for port in (expected["gateway_port"], expected["worker_port"]):
        r.check(str(port) in exposed, where, f"does not EXPOSE {port}")
    r.check(not any(w == "ADD" for w, _ in steps), where, "ADD: use COPY")
    r.check(any(w == "HEALTHCHECK" for w, _ in steps)
            or re.search(r"#.*No HEALTHCHECK:", open(os.path.join(root, "Dockerfile")).read()),
            where, "neither a HEALTHCHECK nor a comment saying why none")
    allowed = dockerignore_included(root)
    r.check(allowed is not None, ".dockerignore", "must be an allow-list: `*` then `!path` lines")
    copied = []
    for word, args in steps:
        if word != "COPY":
            continue
        parts = [p for p in args.split() if not p.startswith("--")]
        from_stage = re.search(r"--from=(\S+)", args)
        if from_stage:
            r.check(from_stage.group(1) in stages, where,
                    f"COPY --from={from_stage.group(1)}: no such build stage")
            continue
        for src in parts[:-1]:
            copied.append(src.rstrip("/"))
            r.check(src not in (".", "./"), where, "COPY . copies the whole context")
            r.check(os.path.exists(os.path.join(root, src)), where, f"COPY {src}: does not exist")
            if allowed is not None:
                r.check(included_by(src.rstrip("/"), allowed), ".dockerignore",
                        f"leaves out {src}, which the Dockerfile copies")
    for needed in sorted(compiled_in_files(root)):
        r.check(included_by(needed, copied), where,
                f"the build reads {needed} (include_str!) but no COPY brings it")
    for src in ("Cargo.toml", "Cargo.lock", "src"):
        r.check(src in copied, where, f"does not COPY {src}")


# ---------------------------------------------------------------------------------------------
# Facts for the Rust side


def facts(root):
    objects = k8s_objects(root)
    commands = []
    configs = []
    for f, d, c in gateway_containers(objects):
        commands.append({"where": f"deploy/k8s/{f} {name_of(d)}", "argv": c.get("args", [])})
        toml_text, _ = config_toml(objects, c, d)
        if toml_text is not None:
            configs.append({"where": f"deploy/k8s/{f} {name_of(d)}", "toml": toml_text,
                            "env": [e["name"] for e in c.get("env", [])]})
    for name, s in compose_services(root).items():
        if "build" in s:
            commands.append({"where": f"compose.yaml {name}", "argv": s.get("command", [])})
            for v in s.get("volumes", []):
                src, _, target = v.partition(":")
                if target.split(":")[0] == flag_value(s.get("command", []), "--config"):
                    configs.append({"where": f"compose.yaml {name}",
                                    "toml": open(os.path.join(root, src)).read(),
                                    "env": sorted(s.get("environment", {}))})
    for word, args in dockerfile_instructions(root):
        if word == "CMD":
            commands.append({"where": "Dockerfile CMD", "argv": json.loads(args)})
    return {"commands": commands, "configs": configs}


def main():
    root, section, expected = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    r = Report()
    extra = {}
    checks = {"k8s": check_k8s, "keda": check_keda, "compose": check_compose,
              "docker": check_docker}
    if section == "facts":
        extra = facts(root)
    else:
        checks[section](root, expected, r)
    print(json.dumps({"errors": r.errors, **extra}))


if __name__ == "__main__":
    main()
