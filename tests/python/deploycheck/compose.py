"""compose.yaml: services, ports, commands and Redis settings, and its default provider."""

import os
import re
import tomllib

import yaml

from deploycheck.files import check_redis_args, flag_value, port_of, redact



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
    ops = flag_value(gw.get("command", []), "--ops-listen")
    r.check(ops is not None and port_of(ops) == expected["ops_port"], f"{where} gateway",
            f"--ops-listen {ops}: /metrics, /v1/status and / belong on port {expected['ops_port']}")
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
