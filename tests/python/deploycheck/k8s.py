"""Kubernetes objects: the official schemas (strict), the kustomization, and agreement across
files (selectors, ports, probes, Secrets, the config file, Redis, grace periods)."""

import os
import re
import tomllib

import kubernetes_validate

from deploycheck.files import (
    GATEWAY_IMAGE, KEDA_API, flag_value, k8s_objects, kustomization, name_of, of_kind, pod_spec, port_of,
    read_text, redact, role_deployment, selects, config_toml, check_redis_args,
)
from deploycheck.network import check_network_policies

# Kubernetes versions every object must validate against (strict: no unknown field): the oldest
# the manifests support (preStop `sleep` is on by default from 1.30) and the newest schema that
# the pinned kubernetes-validate ships.
KUBERNETES_VERSIONS = ["1.30.0", "1.37.0"]

# Files in deploy/k8s that are not applied by default, and why: the autoscaler for clusters
# without KEDA replaces keda.yaml.
NOT_IN_KUSTOMIZATION = {"hpa-external.yaml"}



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
    check_network_policies(objects, r)


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
        # A gateway has two ports: callers' and the operations port (--ops-listen); a worker's
        # one port is an operations port already.
        want = [expected[port_key]] + ([expected["ops_port"]] if role == "serve" else [])
        r.check(ports == want, where, f"containerPorts {ports}: the contract's ports are {want}")
        check_probes(where, c, r, {"livenessProbe": "/livez", "readinessProbe": "/readyz"})
        check_ops(where, objects, d, c, role, expected, r)
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


def check_ops(where, objects, deployment, container, role, expected, r):
    """The operations endpoints: on their own port, probed there, never behind the Service, and
    guarded by the operations key from its Secret."""
    argv = container["args"]
    ops_port = expected["ops_port"] if role == "serve" else expected["worker_port"]
    if role == "serve":
        ops = flag_value(argv, "--ops-listen")
        r.check(ops is not None and ops.startswith("0.0.0.0:") and port_of(ops) == ops_port,
                where, f"--ops-listen {ops}: the operations port is 0.0.0.0:{ops_port}")
    named = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        port = container.get(probe, {}).get("httpGet", {}).get("port")
        r.check(named.get(port, port) == ops_port, where,
                f"{probe} must probe the operations port {ops_port} (got {port})")
    labels = deployment["spec"]["template"]["metadata"].get("labels", {})
    for f, svc in of_kind(objects, "Service"):
        if not selects(svc["spec"]["selector"], labels):
            continue
        for sp in svc["spec"]["ports"]:
            target = sp.get("targetPort", sp["port"])
            r.check(named.get(target, target) != ops_port, f"{f} Service/{name_of(svc)}",
                    f"exposes the operations port {ops_port}: scrape and probe the pods directly")
    env = {e["name"]: e for e in container.get("env", [])}
    r.check("secretKeyRef" in env.get("CAPTCHA_GATEWAY_OPS_KEY", {}).get("valueFrom", {}), where,
            "CAPTCHA_GATEWAY_OPS_KEY must come from a Secret (the operations key)")


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
