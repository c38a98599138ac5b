"""Start a new PrivateUse1 backend from this one, and follow it later.

    python tools/scaffold.py new --device foo --dest ../torch-foo
        [--ccl-name fccl] [--api-prefix fo] [--rev HEAD]
    python tools/scaffold.py update --to <rev>      # inside a generated tree

``new`` copies the tree of this repository at ``--rev`` (its committed files,
``git archive``) and renames everything that names this backend, in file
contents and in paths:

* the device name in its case forms (``openreg``, ``OpenReg``, ``OPENREG``), hence
  the Python package ``torch_openreg``, ``torch.openreg``, the libraries
  (``libopenreg.so``, ...), C++ namespaces, CMake targets, the ``OPENREG_*``
  environment variables, the profiler plugin and the Inductor backend names;
* the collectives library (``occl``, ``OCCL``: ``liboccl``, the c10d backend name,
  ``OCCL_*`` variables, shared-memory segment names), ``--ccl-name``;
* the runtime's C API prefix (``orMalloc``, ``orStream_t``, ``OR_MAX_DEVICES``),
  ``--api-prefix``.

The result is a git repository with one commit; ``SCAFFOLDED_FROM.json`` records the
source repository, the commit and the names (the only file that still holds the old
names). ``update`` regenerates the recorded version and the new one under the same
names and merges their difference into the vendor's tree, three-way, file by file
(``git merge-file``): conflicts are left marked and listed (exit status 1), files the
vendor deleted stay deleted (and are listed), and the record moves to the new version
only when the merge is clean. See docs/scaffold.md.
"""

from __future__ import annotations

import argparse
import json
import keyword
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass

RECORD = "SCAFFOLDED_FROM.json"
ROOT = pathlib.Path(__file__).resolve().parent.parent

# This tree's own names (a generated tree's copy of this file has its names here:
# the renaming rewrites them like any other occurrence; the C API prefix is taken
# from a name of the API, which the renaming recognises, not from a bare string).
SELF = {"device": "openreg", "camel": "OpenReg", "ccl": "occl",
        "api_prefix": "orMalloc"[: -len("Malloc")]}

# c10::DeviceType names (c10/core/DeviceType.cpp, lower case), PyTorch's own.
TORCH_DEVICE_TYPES = {
    "cpu", "cuda", "mkldnn", "opengl", "opencl", "ideep", "hip", "fpga", "maia", "xla",
    "vulkan", "metal", "xpu", "mps", "meta", "hpu", "ve", "lazy", "ipu", "mtia",
    "privateuseone", "privateuse1", "privateuse2", "privateuse3", "fake",
}


class ScaffoldError(Exception):
    """A refusal with the reason (the command prints it and exits with status 2)."""


def camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


@dataclass(frozen=True)
class Names:
    device: str
    ccl: str
    api_prefix: str
    camel: str = ""  # the device's CamelCase form (OpenReg); default from the name

    def forms(self, which: str) -> list[str]:
        """The case forms of the device or collectives name, most specific first."""
        n = getattr(self, which)
        c = (self.camel or camel(n)) if which == "device" else camel(n)
        return [n.upper(), c, n, n.capitalize()]

    def as_dict(self) -> dict:
        return {"device": self.device, "camel": self.camel or camel(self.device),
                "ccl": self.ccl, "api_prefix": self.api_prefix}


def check_name(kind: str, value: str, other: set[str] = frozenset()) -> None:
    if not re.fullmatch(r"[a-z][a-z0-9_]*", value or ""):
        raise ScaffoldError(f"--{kind}: {value!r} is not a lower-case identifier "
                            "([a-z][a-z0-9_]*)")
    if keyword.iskeyword(value) or keyword.issoftkeyword(value):
        raise ScaffoldError(f"--{kind}: {value!r} is a Python keyword")
    if value in sys.stdlib_module_names or f"torch_{value}" in sys.stdlib_module_names:
        raise ScaffoldError(f"--{kind}: {value!r} is a Python standard-library module")
    if value in TORCH_DEVICE_TYPES:
        raise ScaffoldError(f"--{kind}: {value!r} is one of PyTorch's own device types "
                            f"(c10::DeviceType: {', '.join(sorted(TORCH_DEVICE_TYPES))})")
    if value in other:
        raise ScaffoldError(f"--{kind}: {value!r} is already used by another name")


def make_names(device: str, ccl: str | None, api_prefix: str | None, old: Names) -> Names:
    check_name("device", device)
    ccl = ccl or f"{device[0]}ccl"
    check_name("ccl-name", ccl, {device})
    api_prefix = api_prefix or device[:2]
    if not re.fullmatch(r"[a-z][a-z0-9]*", api_prefix):
        raise ScaffoldError(f"--api-prefix: {api_prefix!r} must be lower-case letters and digits")
    if api_prefix == old.api_prefix and device != old.device:
        raise ScaffoldError(f"--api-prefix: {api_prefix!r} is the source's own prefix")
    return Names(device, ccl, api_prefix, camel(device))


def replacements(old: Names, new: Names) -> list[tuple[re.Pattern, str]]:
    """(pattern, replacement) pairs, applied in order to contents and paths."""
    pairs = []
    for which in ("device", "ccl"):
        for o, n in zip(old.forms(which), new.forms(which)):
            pairs.append((re.compile(re.escape(o)), n))
    # The C API: orMalloc, orStream_t (an identifier that starts with the
    # prefix and an upper-case letter) and OR_MAX_DEVICES.
    p, q = old.api_prefix, new.api_prefix
    pairs.append((re.compile(rf"\b{re.escape(p)}(?=[A-Z])"), q))
    pairs.append((re.compile(rf"\b{re.escape(p.upper())}_(?=[A-Z])"), q.upper() + "_"))
    return pairs


def leftover_pattern(old: Names) -> re.Pattern:
    """What must not remain in a generated tree (case-insensitive names, the API prefix)."""
    return re.compile(rf"(?i:{re.escape(old.device)}|{re.escape(old.ccl)})"
                      rf"|\b{re.escape(old.api_prefix)}[A-Z]\w*|\b{re.escape(old.api_prefix.upper())}_[A-Z]")


def apply(text: str, pairs) -> str:
    for pattern, repl in pairs:
        text = pattern.sub(repl, text)
    return text


def git(*args, cwd, capture=True, check=True) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=capture, text=True)
    if check and r.returncode != 0:
        raise ScaffoldError(f"git {' '.join(args)} failed in {cwd}:\n{r.stderr}")
    return r.stdout if capture else ""


def export(source: pathlib.Path, rev: str, dest: pathlib.Path) -> str:
    """The committed tree of `source` at `rev` into `dest`; returns the full commit id."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}", cwd=source).strip()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as f:
        subprocess.run(["git", "archive", "--format=tar", commit], cwd=source, stdout=f,
                       check=True)
        f.seek(0)
        with tarfile.open(fileobj=f) as tar:
            tar.extractall(dest, filter="tar")
    return commit


def rename_tree(tree: pathlib.Path, pairs) -> None:
    """Rewrite every text file and every path of `tree` in place."""
    files = sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink())
    for path in files:
        if path.name == RECORD:
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        new = apply(text, pairs)
        if new != text:
            path.write_text(new, encoding="utf-8")
    # Deepest first, so that renaming a folder does not move paths still to visit.
    for path in sorted(tree.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        name = apply(path.name, pairs)
        if name != path.name:
            path.rename(path.with_name(name))


def generate(source: pathlib.Path, rev: str, old: Names, new: Names, dest: pathlib.Path) -> str:
    commit = export(source, rev, dest)
    existing = dest / RECORD
    if existing.exists():
        existing.unlink()  # the source's own record (a tree scaffolded from a scaffold)
    rename_tree(dest, replacements(old, new))
    return commit


def write_record(tree: pathlib.Path, source: pathlib.Path, commit: str, old: Names,
                 new: Names) -> None:
    (tree / RECORD).write_text(json.dumps({
        "source": str(source), "commit": commit, "from": old.as_dict(), "to": new.as_dict(),
    }, indent=2) + "\n")


def leftovers(tree: pathlib.Path, old: Names) -> list[str]:
    """Lines of `tree` (files and paths) that still name the old backend."""
    pattern = leftover_pattern(old)
    found = []
    for path in sorted(tree.rglob("*")):
        rel = path.relative_to(tree)
        if rel.parts[0] == ".git" or path.name == RECORD:
            continue
        if pattern.search(str(rel)):
            found.append(f"{rel}: (path)")
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        for i, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{rel}:{i}: {line.strip()[:120]}")
    return found


# ------------------------------------------------------------------ commands


def cmd_new(args) -> int:
    source = pathlib.Path(args.source).resolve()
    old = Names(**SELF)
    new = make_names(args.device, args.ccl_name, args.api_prefix, old)
    dest = pathlib.Path(args.dest).resolve()
    if dest.exists() and any(dest.iterdir()):
        raise ScaffoldError(f"{dest} exists and is not empty: choose a new destination")
    commit = generate(source, args.rev, old, new, dest)
    write_record(dest, source, commit, old, new)
    left = leftovers(dest, old)
    if left:
        raise ScaffoldError("the generated tree still names the source backend:\n  "
                            + "\n  ".join(left[:20]))
    git("init", "-q", cwd=dest)
    git("add", "-A", cwd=dest)
    git("-c", f"user.name=scaffold", "-c", "user.email=scaffold@localhost", "commit", "-q",
        "-m", f"Scaffolded as {new.device} (see {RECORD})", cwd=dest)
    print(f"created {dest}: device {new.device!r}, package torch_{new.device}, "
          f"collectives {new.ccl!r}, C API prefix {new.api_prefix!r} "
          f"(from {commit[:12]})")
    return 0


def tracked_files(tree: pathlib.Path) -> set[str]:
    """The files of a generated (not yet built) tree, the record excepted."""
    return {p.relative_to(tree).as_posix() for p in tree.rglob("*")
            if p.is_file() and p.name != RECORD}


def cmd_update(args) -> int:
    tree = pathlib.Path(args.tree).resolve()
    record_path = tree / RECORD
    if not record_path.exists():
        raise ScaffoldError(f"{tree} has no {RECORD}: run update inside a generated tree")
    record = json.loads(record_path.read_text())
    source = pathlib.Path(args.source or record["source"]).resolve()
    old, new = Names(**record["from"]), Names(**record["to"])
    with tempfile.TemporaryDirectory() as tmp:
        base_dir, next_dir = pathlib.Path(tmp, "base"), pathlib.Path(tmp, "next")
        generate(source, record["commit"], old, new, base_dir)
        target = generate(source, args.to, old, new, next_dir)
        base, nxt = tracked_files(base_dir), tracked_files(next_dir)
        conflicts, kept_deleted, added, changed = [], [], [], []
        for rel in sorted(base | nxt):
            b = base_dir / rel if rel in base else None
            n = next_dir / rel if rel in nxt else None
            o = tree / rel
            if b and n and b.read_bytes() == n.read_bytes():
                continue  # upstream did not change it
            if not o.exists():
                if b is None:  # added upstream
                    o.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(n, o)
                    added.append(rel)
                else:          # the vendor deleted it: it stays deleted
                    kept_deleted.append(rel)
                continue
            if n is None:      # deleted upstream
                if o.read_bytes() == b.read_bytes():
                    o.unlink()
                    changed.append(rel)
                else:
                    conflicts.append(f"{rel} (deleted upstream, changed here: kept)")
                continue
            base_file = b if b else pathlib.Path(tmp, "empty")
            base_file.touch()
            r = subprocess.run(["git", "merge-file", "-L", "yours", "-L", "base", "-L",
                                f"upstream {target[:12]}", str(o), str(base_file), str(n)],
                               capture_output=True, text=True)
            if r.returncode < 0 or r.returncode > 127:
                raise ScaffoldError(f"git merge-file failed on {rel}: {r.stderr}")
            if r.returncode > 0:
                conflicts.append(rel)
            else:
                changed.append(rel)
    for rel in added:
        print(f"added     {rel}")
    for rel in changed:
        print(f"merged    {rel}")
    for rel in kept_deleted:
        print(f"deleted here, changed upstream (left deleted): {rel}")
    if conflicts:
        print(f"conflicts ({len(conflicts)}), marked in the files:", file=sys.stderr)
        for c in conflicts:
            print(f"  {c}", file=sys.stderr)
        print(f"{RECORD} still records {record['commit'][:12]}: resolve, then run update "
              "again or edit the record", file=sys.stderr)
        return 1
    record["commit"] = target
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"updated to {target[:12]}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    n = sub.add_parser("new", help="generate a new backend tree")
    n.add_argument("--device", required=True, help="the device name (torch.device(NAME))")
    n.add_argument("--dest", required=True, help="a new (or empty) directory")
    n.add_argument("--ccl-name", help="the collectives library (default: first letter + 'ccl')")
    n.add_argument("--api-prefix", help="the runtime C API prefix (default: two letters)")
    n.add_argument("--rev", default="HEAD", help="the source revision (default HEAD)")
    n.add_argument("--source", default=str(ROOT), help="the source repository")
    u = sub.add_parser("update", help="merge a later source revision into a generated tree")
    u.add_argument("--to", required=True, help="the source revision to update to")
    u.add_argument("--tree", default=".", help="the generated tree (default: here)")
    u.add_argument("--source", help="the source repository (default: the recorded one)")
    args = ap.parse_args(argv)
    try:
        return cmd_new(args) if args.command == "new" else cmd_update(args)
    except ScaffoldError as e:
        print(f"scaffold: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
