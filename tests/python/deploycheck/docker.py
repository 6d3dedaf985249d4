"""The Dockerfile and .dockerignore: stages, user, ports, and that the build context holds
every file the build reads."""

import os
import re



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
