"""The Dockerfile and .dockerignore: stages, user, ports, what the build context lets in, and
that the build stage holds every file cargo reads (the layout itself: context.py)."""

import os
import re

from deploycheck.cargo import cargo_inputs
from deploycheck.context import (
    ContextError, build_stage, context_files, copy_operands, dockerfile_instructions, plan_copies,
    sources_in, split_flags,
)

# What must never reach the builder: build output, history, and anything that looks like a key.
CONTEXT_NEVER = re.compile(r"(^|/)(target|\.git)(/|$)|(^|/)\.env$|\.(pem|key|p12)$")


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
    r.check(first_pattern(root) == "*", ".dockerignore",
            "must be an allow-list: `*` first, then `!path` lines")
    sources = copy_sources(root, steps, stages)
    for src, problem in sources:
        r.errors.append(f"{where}: COPY {src}: {problem}")
    if not sources:
        check_layout(root, r)


def first_pattern(root):
    path = os.path.join(root, ".dockerignore")
    lines = [l.strip() for l in open(path)] if os.path.exists(path) else []
    return next((l for l in lines if l and not l.startswith("#")), None)


def copy_sources(root, steps, stages):
    """(source, problem) for each COPY source of the build stage that Docker would not find,
    and each --from naming no earlier stage."""
    try:
        chain = build_stage(steps)
    except ContextError as e:
        return [("", str(e))]
    context = context_files(root)
    out = []
    for _, _, body in chain:
        for word, args in body:
            if word != "COPY":
                continue
            flags, rest = split_flags(args)
            if any(f.startswith("--from") for f in flags):
                continue
            try:
                srcs, _ = copy_operands(rest)
            except (ContextError, ValueError) as e:
                out.append((rest, str(e)))
                continue
            for src in srcs:
                if src in (".", "./"):
                    out.append((src, "copies the whole context"))
                elif not sources_in(context, src):
                    exists = os.path.exists(os.path.join(root, src))
                    out.append((src, "left out by .dockerignore: let it in with a `!` line"
                                if exists else "does not exist"))
    for word, args in steps:
        m = re.search(r"--from=(\S+)", args) if word == "COPY" else None
        if m and m.group(1) not in stages:
            out.append((m.group(1), "--from names no build stage"))
    return out


def expand_folders(root, needed):
    """A folder needed whole (include_str!(concat!("lua/", $file)) names only its folder)
    stands for every file under it."""
    out = {}
    for path, why in needed.items():
        full = os.path.join(root, path)
        if not os.path.isdir(full):
            out[path] = why
            continue
        for folder, _, files in os.walk(full):
            for name in files:
                out[os.path.relpath(os.path.join(folder, name), root)] = why
    return out


def check_layout(root, r):
    """Each file cargo reads is where cargo looks for it in the build stage, and the context
    carries nothing it must not."""
    for path in context_files(root):
        r.check(not CONTEXT_NEVER.search(path), ".dockerignore",
                f"lets {path} into the build context")
    try:
        layout, workdir, _, _ = plan_copies(root, dockerfile_instructions(root))
    except ContextError as e:
        r.errors.append(f"Dockerfile: {e}")
        return
    needed, problems = cargo_inputs(root)
    for problem in problems:
        r.errors.append(f"Cargo.toml: {problem}")
    prefix = workdir.rstrip("/") + "/"
    for path, why in sorted(expand_folders(root, needed).items()):
        r.check(layout.get(prefix + path) == path, "Dockerfile",
                f"the build reads {path} ({why}) but no COPY brings it to {prefix}{path}")
