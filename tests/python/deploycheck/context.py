"""The image's build, without a Docker engine: the build context as `docker build` sends it
(.dockerignore read with Docker's own pattern rules), and the build stage's file system as its
COPY lines leave it. The static `docker` checks and the offline build in tests/it/deploy_image.rs
both read the layout from here, so the two cannot disagree about what the builder sees.

Docker's rules, as its pattern matcher (moby/patternmatcher) and .dockerignore reader apply them:
- a line starting with `#` is a comment; lines are trimmed; `!` re-includes; each pattern is
  cleaned (`./a/` is `a`, a leading `/` dropped);
- `*` and `?` never cross a `/`; `**` crosses any number of folders, including none;
- a pattern that matches a folder matches everything under it;
- the last pattern that matches a path decides (unlike .gitignore, `*.md` matches only at the
  top: `docs/a.md` is matched neither by it nor through its parent `docs`).
"""

import json
import os
import posixpath
import re
import shlex
import shutil

WILDCARDS = set("*?[\\")


class ContextError(Exception):
    """What `docker build` would stop with, in a line."""


def dockerfile_instructions(root):
    """(INSTRUCTION, arguments) with continuation lines joined; comment lines dropped, also
    inside a continuation, as Docker does."""
    text = open(os.path.join(root, "Dockerfile")).read()
    out, current = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        word, _, rest = current.partition(" ")
        out.append((word.upper(), rest.strip()))
        current = ""
    return out


def compile_pattern(pattern):
    """A Docker ignore pattern (without its `!`) as an anchored regular expression."""
    out, i = "^", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*" and pattern[i + 1:i + 2] == "*":
            i += 2
            if pattern[i:i + 1] == "/":
                i += 1
            # `**` at the end takes everything; elsewhere any number of whole folders.
            out += ".*" if i == len(pattern) else "(.*/)?"
            continue
        if ch == "*":
            out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "[":
            end = pattern.find("]", i + 1)
            if end < 0:
                raise ContextError(f".dockerignore: unterminated [ in {pattern!r}")
            body = pattern[i + 1:end]
            if body.startswith("^"):
                body = "!" + body[1:]
            out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
            i = end
        elif ch == "\\" and i + 1 < len(pattern):
            i += 1
            out += re.escape(pattern[i])
        else:
            out += re.escape(ch)
        i += 1
    return re.compile(out + "$")


def clean(path):
    cleaned = posixpath.normpath(path)
    return cleaned.lstrip("/") if cleaned != "/" else "."


def read_dockerignore(root):
    """(re-include?, pattern text, regex) per line of root/.dockerignore, in order."""
    path = os.path.join(root, ".dockerignore")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path, encoding="utf-8-sig"):
        if line.startswith("#"):
            continue
        line = line.strip()
        if not line:
            continue
        include = line.startswith("!")
        if include:
            line = line[1:].strip()
        if not line:
            continue
        line = clean(line)
        out.append((include, line, compile_pattern(line)))
    return out


def ignored(patterns, rel):
    """Whether Docker leaves `rel` (a path relative to the context) out of the context."""
    parents = rel.split("/")[:-1]
    excluded = False
    for include, _, regex in patterns:
        # A pattern can only change the verdict: skip one that would leave it as it is.
        if include != excluded:
            continue
        hit = regex.match(rel) is not None or any(
            regex.match("/".join(parents[:i + 1])) for i in range(len(parents)))
        if hit:
            excluded = not include
    return excluded


def may_reinclude_under(patterns, folder):
    """Whether a `!` pattern could take back something under an excluded `folder`. Without one,
    the walk skips the folder (target/ holds gigabytes), as Docker's does."""
    parts = folder.split("/")
    for include, text, _ in patterns:
        if not include:
            continue
        for mine, theirs in zip(parts, text.split("/")):
            if WILDCARDS & set(theirs):
                return True
            if mine != theirs:
                break
        else:
            return True
    return False


def context_files(root):
    """Every path (file, symlink or empty folder) the build context holds, relative to root.
    Symlinks are sent as links, never followed, as Docker does."""
    patterns = read_dockerignore(root)
    found = []
    for folder, dirs, files in os.walk(root):
        rel_folder = os.path.relpath(folder, root)
        rel_folder = "" if rel_folder == "." else rel_folder + "/"
        kept = []
        for d in sorted(dirs):
            rel = rel_folder + d
            if os.path.islink(os.path.join(folder, d)):
                files.append(d)
            elif not ignored(patterns, rel) or may_reinclude_under(patterns, rel):
                kept.append(d)
        dirs[:] = kept
        for name in sorted(files):
            rel = rel_folder + name
            if not ignored(patterns, rel):
                found.append(rel)
        if rel_folder and not dirs and not files and not ignored(patterns, rel_folder[:-1]):
            found.append(rel_folder[:-1])
    return sorted(found)


def glob_regex(pattern):
    """A COPY source with wildcards, matched as Go's filepath.Match does (no `**`)."""
    return compile_pattern(pattern.replace("**", "*"))


def sources_in(context, src):
    """The context paths one COPY source names: (top path, files under it)."""
    src = clean(src)
    if src == ".":
        return [(".", context)]
    tops = {src} if not WILDCARDS & set(src) else {
        "/".join(p.split("/")[:src.count("/") + 1]) for p in context
        if glob_regex(src).match("/".join(p.split("/")[:src.count("/") + 1]))}
    out = []
    for top in sorted(tops):
        under = [p for p in context if p == top or p.startswith(top + "/")]
        if under:
            out.append((top, under))
    return out


def split_flags(args):
    """An instruction's leading `--flag[=value]` words, and the rest of its line."""
    m = re.match(r"((?:--\S+\s+)*)(.*)$", args.strip(), re.S)
    return m.group(1).split(), m.group(2).strip()


def copy_operands(rest):
    """Sources and destination of a COPY: the JSON form or words split at whitespace."""
    if rest.startswith("["):
        operands = json.loads(rest)
    else:
        operands = rest.split()
    if len(operands) < 2:
        raise ContextError(f"COPY {rest}: needs a source and a destination")
    return operands[:-1], operands[-1]


def stages(steps):
    """The Dockerfile's stages: [(name or index, base, [(instruction, arguments)])]."""
    out = []
    for word, args in steps:
        if word == "FROM":
            words = args.split()
            words = [w for w in words if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].lower() == "as" else str(len(out))
            out.append((name, words[0], []))
        elif out:
            out[-1][2].append((word, args))
    return out


def runs_cargo(run_args):
    return re.search(r"(^|[\s;&|(])cargo\s", run_args) is not None


def build_stage(steps):
    """The stage whose RUN invokes cargo, after the earlier stages it is built FROM."""
    all_stages = stages(steps)
    for index, stage in enumerate(all_stages):
        if any(w == "RUN" and runs_cargo(a) for w, a in stage[2]):
            earlier = {s[0]: s for s in all_stages[:index]}
            chain = [stage]
            while chain[0][1] in earlier:
                chain.insert(0, earlier.pop(chain[0][1]))
            return chain
    raise ContextError("Dockerfile: no stage RUNs cargo")


def cargo_command(run_args):
    """The cargo invocation of a RUN line: argv, without the BuildKit flags and the rest of the
    shell line."""
    _, shell = split_flags(run_args)
    for part in re.split(r"&&|\|\||;", shell):
        argv = shlex.split(part)
        if argv and posixpath.basename(argv[0]) == "cargo":
            return argv
    raise ContextError(f"RUN {run_args}: no cargo command")


def plan_copies(root, steps):
    """The build stage's COPY lines applied to the context: (layout, workdir, cargo argv, context)
    where layout maps each absolute path in the stage to the context path it came from."""
    context = context_files(root)
    layout, workdir, cargo = {}, "/", None
    for _, _, body in build_stage(steps):
        for word, args in body:
            if word == "WORKDIR":
                workdir = posixpath.normpath(posixpath.join(workdir, args.strip()))
            elif word in ("COPY", "ADD"):
                copy_into(root, layout, context, workdir, word, args)
            elif word == "RUN" and cargo is None and runs_cargo(args):
                cargo = (workdir, cargo_command(args))
    return layout, cargo[0], cargo[1], context


def copy_into(root, layout, context, workdir, word, args):
    """One COPY: a folder source copies what is under it, a file source itself (into `dest` when
    that is a folder: it ends with `/`, is `.`, or already holds files)."""
    flags, rest = split_flags(args)
    if any(f.startswith("--from") for f in flags):
        return  # from another stage or image: not the build context
    unknown = [f for f in flags if not re.match(r"--(chown|chmod|link)(=|$)", f)]
    if unknown:
        raise ContextError(f"{word} {args}: this check does not model {unknown}")
    srcs, dest = copy_operands(rest)
    dest_abs = posixpath.normpath(posixpath.join(workdir, dest))
    found = []
    for src in srcs:
        hits = sources_in(context, src)
        if not hits:
            raise ContextError(f"{word} {src}: not in the build context (.dockerignore or missing)")
        found.extend(hits)
    into_dir = (dest.endswith("/") or clean(dest) == "."
                or any(p.startswith(dest_abs.rstrip("/") + "/") for p in layout))
    if len(found) > 1 and not into_dir:
        raise ContextError(f"{word} {args}: several sources need a destination ending in /")
    for top, under in found:
        folder = top == "." or os.path.isdir(os.path.join(root, top)) and not os.path.islink(
            os.path.join(root, top))
        for path in under:
            if top == ".":
                rel = path
            elif folder:
                rel = path[len(top) + 1:]
            else:
                rel = posixpath.basename(top) if into_dir else ""
            layout[posixpath.normpath(posixpath.join(dest_abs, rel))] = path


def lay_out(root, out):
    """Writes the build stage's files under `out` (an absolute stage path /a/b lands at
    out/a/b) and returns what was done."""
    steps = dockerfile_instructions(root)
    layout, workdir, cargo, context = plan_copies(root, steps)
    for dest, src in sorted(layout.items()):
        target = os.path.join(out, dest.lstrip("/"))
        full = os.path.join(root, src)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.islink(full):
            os.symlink(os.readlink(full), target)
        elif os.path.isdir(full):
            os.makedirs(target, exist_ok=True)
        else:
            shutil.copy2(full, target)
    os.makedirs(os.path.join(out, workdir.lstrip("/")), exist_ok=True)
    return {"workdir": workdir, "cargo": cargo, "context": context,
            "copied": sorted(layout)}
