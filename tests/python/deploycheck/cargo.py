"""What cargo reads from the source tree before and while it builds the workspace, found from the
manifests themselves: every workspace member's and path dependency's Cargo.toml (cargo loads the
whole workspace, dev-dependencies included, even to build one binary), the target files cargo
looks for when it loads a manifest, build scripts, and include_str!/include_bytes! inputs."""

import glob
import os
import posixpath
import re
import tomllib

DEPENDENCY_TABLES = ("dependencies", "dev-dependencies", "build-dependencies")


def rel(root, path):
    return posixpath.normpath(os.path.relpath(path, root).replace(os.sep, "/"))


def dependency_tables(manifest):
    yield from (manifest.get(t, {}) for t in DEPENDENCY_TABLES)
    for target in manifest.get("target", {}).values():
        yield from (target.get(t, {}) for t in DEPENDENCY_TABLES)
    yield manifest.get("workspace", {}).get("dependencies", {})


def target_files(package, manifest):
    """(file, why) for the targets cargo resolves on load: a target declared without `path`
    must exist at its default place (cargo refuses the manifest otherwise), and the library
    and binaries are compiled."""
    out = []
    lib = manifest.get("lib")
    if lib is not None:
        out.append((lib.get("path", "src/lib.rs"), "the [lib] target"))
    for b in manifest.get("bin", []):
        out.append((b.get("path", f"src/bin/{b['name']}.rs"), f"the [[bin]] {b['name']}"))
    for kind, folder in (("bench", "benches"), ("test", "tests"), ("example", "examples")):
        for t in manifest.get(kind, []):
            if "path" in t:
                continue
            single = f"{folder}/{t['name']}.rs"
            if not os.path.exists(os.path.join(package, single)):
                single = f"{folder}/{t['name']}/main.rs"
            out.append((single, f"the [[{kind}]] {t['name']}"))
    build = manifest.get("package", {}).get("build")
    if isinstance(build, str):
        out.append((build, "the build script"))
    elif build is None and os.path.exists(os.path.join(package, "build.rs")):
        out.append(("build.rs", "the build script"))
    return out


def compiled_in(root, package_dir):
    """Files a package's sources read with include_str!/include_bytes!."""
    found = set()
    for folder, _, files in os.walk(os.path.join(root, package_dir, "src")):
        for name in files:
            if not name.endswith(".rs"):
                continue
            text = open(os.path.join(folder, name)).read()
            for m in re.finditer(r'include_(?:str|bytes)!\(\s*(?:concat!\(\s*)?"([^"]+)"', text):
                found.add(rel(root, os.path.join(folder, m.group(1))))
    return found


def cargo_inputs(root):
    """{path relative to root: why cargo reads it} for the workspace at root, and the problems
    found on the way (a member or path dependency outside the root, or missing)."""
    needed, problems, seen = {"Cargo.lock": "--locked reads it"}, [], set()

    def load(package_dir, why):
        manifest_path = posixpath.join(package_dir, "Cargo.toml") if package_dir != "." \
            else "Cargo.toml"
        if manifest_path.startswith("../"):
            problems.append(f"{why}: {manifest_path} is outside the build context")
            return
        if manifest_path in seen:
            return
        seen.add(manifest_path)
        needed[manifest_path] = why
        full = os.path.join(root, manifest_path)
        if not os.path.exists(full):
            problems.append(f"{why}: {manifest_path} does not exist")
            return
        manifest = tomllib.load(open(full, "rb"))
        for member in manifest.get("workspace", {}).get("members", []):
            pattern = os.path.join(root, package_dir, member)
            dirs = sorted(glob.glob(pattern)) if glob.has_magic(member) else [pattern]
            for d in dirs:
                load(rel(root, d), f"workspace member {member}")
        if "package" in manifest:
            for path, what in target_files(os.path.join(root, package_dir), manifest):
                needed.setdefault(rel(root, os.path.join(root, package_dir, path)),
                                  f"{what} of {manifest_path}")
            for path in compiled_in(root, package_dir):
                needed.setdefault(path, "include_str!")
        for table in dependency_tables(manifest):
            for name, spec in table.items():
                if isinstance(spec, dict) and "path" in spec:
                    load(rel(root, os.path.join(root, package_dir, spec["path"])),
                         f"path dependency {name} of {manifest_path}")

    load(".", "the workspace manifest")
    return needed, problems
