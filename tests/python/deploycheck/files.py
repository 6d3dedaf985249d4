"""What the deployment checks share: loading the files, finding objects and containers,
reading flags, and the report the checks write their findings to."""

import os
import re
import tomllib

import yaml

KEDA_API = "keda.sh/v1alpha1"
GATEWAY_IMAGE = "captcha-gateway"


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


def check_redis_args(where, argv, r):
    for flag, value in (("--maxmemory-policy", "noeviction"), ("--appendonly", "yes"),
                        ("--appendfsync", "always")):
        got = flag_value(argv, flag)
        r.check(got == value, where, f"{flag} must be {value} (got {got})")
