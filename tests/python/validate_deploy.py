"""Offline checks of the deployment files (deploy/k8s, compose.yaml, Dockerfile): run by
tests/it/deploy.rs, which passes the values every part must agree on.

    validate_deploy.py ROOT SECTION EXPECTED_JSON

SECTION is one of k8s, keda, compose, docker, facts, context, image. Prints one JSON object:
`errors` (a list of "file: what is wrong" lines, empty when all is well) and, for `facts`, what the
Rust side checks against the binary itself (the command lines and the TOML files the containers
get); for `context`, the paths of ROOT's Docker build context; for `image` (one more argument, an
empty folder OUT), the build stage's files written under OUT, its WORKDIR and its cargo command.
"""

import json
import os
import sys

from deploycheck.compose import check_compose, compose_services
from deploycheck.context import ContextError, context_files, dockerfile_instructions, lay_out
from deploycheck.docker import check_docker
from deploycheck.files import (
    Report, config_toml, flag_value, gateway_containers, k8s_objects, name_of, of_kind, pod_spec,
    role_deployment,
)
from deploycheck.k8s import check_k8s
from deploycheck.keda import check_keda


def facts(root):
    """What the Rust side checks against the binary: every command line of our image, and
    every TOML file a container reads with the names of the variables it gets."""
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
    return {"commands": commands, "configs": configs, "keda": keda_facts(objects)}


def keda_facts(objects):
    """What a real Redis is asked with: the ScaledObject's replica bounds and triggers, the dev
    Redis's command line, and the workers' REDIS_URL (still holding `$(REDIS_PASSWORD)`)."""
    so = next(o for _, o in of_kind(objects, "ScaledObject"))["spec"]
    redis = next(c for _, d in of_kind(objects, "Deployment") for c in pod_spec(d)["containers"]
                 if c.get("image", "").startswith("redis:"))
    _, _, worker = role_deployment(objects, "worker")
    return {
        "min": so.get("minReplicaCount", 0),
        "max": so.get("maxReplicaCount", 100),
        "triggers": [t["metadata"] for t in so["triggers"]],
        "redis_argv": redis.get("command", []) + redis.get("args", []),
        "worker_redis_url": next(e["value"] for e in worker["env"] if e["name"] == "REDIS_URL"),
    }


def main():
    root, section, expected = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    r = Report()
    extra = {}
    checks = {"k8s": check_k8s, "keda": check_keda, "compose": check_compose,
              "docker": check_docker}
    if section == "facts":
        extra = facts(root)
    elif section == "context":
        extra = {"context": context_files(root)}
    elif section == "image":
        try:
            extra = lay_out(root, sys.argv[4])
        except ContextError as e:
            r.errors.append(str(e))
    else:
        checks[section](root, expected, r)
    print(json.dumps({"errors": r.errors, **extra}))


if __name__ == "__main__":
    main()
