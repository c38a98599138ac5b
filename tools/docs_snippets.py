"""Keep code excerpts in docs/ identical to marked regions of the sources.

A source region is delimited by comment lines ``[docs:NAME]`` and
``[docs:NAME:end]`` (after ``//`` or ``#``). A doc includes it with an HTML
comment directly followed by a fenced code block:

    <!-- snippet: openreg_runtime/src/memory.cpp#dual-mapping -->
    ```cpp
    ...the region, dedented...
    ```

``python tools/docs_snippets.py`` rewrites every such block from the sources;
``--check`` only reports differences (the test suite runs the check, so docs
cannot drift from code). Both also list marked regions that no doc includes:
a region exists to be shown, so each one must be used by some page.

Marked regions may be in any source file of the repository (C/C++, Python,
CMake) under any folder, except the virtual environment, the build tree and
hidden folders (``.git``, ...).
"""

import os
import pathlib
import re
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent

SOURCE_SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".cu", ".h", ".hh", ".hpp", ".hxx", ".inl",
                   ".py", ".pyi", ".cmake"}
SOURCE_NAMES = {"CMakeLists.txt"}
SKIP_DIRS = {".venv", "venv", "build", "dist", "__pycache__"}  # and every hidden folder
# Anything that looks like a start or end marker in a comment, well-formed or
# not (text after it, no space after the comment sign), so that region()
# reports a malformed one instead of the scan skipping it.
MARKER_LIKE = re.compile(r"(?://|#)\s*\[docs:([\w-]+)(?::end)?\]")
DIRECTIVE = re.compile(
    r"<!-- snippet: (?P<path>[^#\s]+)#(?P<name>[\w-]+) -->\n(?P<fence>```\w*)\n(?P<body>.*?)```",
    re.S,
)


class SnippetError(Exception):
    pass


def region(path: str, name: str) -> str:
    src = ROOT / path
    if not src.exists():
        raise SnippetError(f"{path}: file not found")
    lines = src.read_text().splitlines()
    start = [i for i, l in enumerate(lines) if re.search(rf"(//|#) \[docs:{re.escape(name)}\]\s*$", l)]
    end = [i for i, l in enumerate(lines) if re.search(rf"(//|#) \[docs:{re.escape(name)}:end\]\s*$", l)]
    if len(start) != 1 or len(end) != 1 or end[0] <= start[0]:
        raise SnippetError(f"{path}: marker [docs:{name}] missing, duplicated or unterminated")
    return textwrap.dedent("\n".join(lines[start[0] + 1:end[0]])) + "\n"


def process(doc: pathlib.Path, write: bool) -> list:
    text = doc.read_text()
    problems = []

    def repl(m):
        try:
            body = region(m["path"], m["name"])
        except SnippetError as e:
            problems.append(f"{doc.relative_to(ROOT)}: {e}")
            return m.group(0)
        if body != m["body"]:
            problems.append(f"{doc.relative_to(ROOT)}: snippet {m['path']}#{m['name']} is out of date")
        return f"<!-- snippet: {m['path']}#{m['name']} -->\n{m['fence']}\n{body}```"

    new = DIRECTIVE.sub(repl, text)
    if write and new != text:
        doc.write_text(new)
    return problems


def snippets(doc: pathlib.Path) -> list:
    return [(m["path"], m["name"]) for m in DIRECTIVE.finditer(doc.read_text())]


def source_files() -> list:
    """Every C/C++, Python and CMake file of the repository, as paths relative to ROOT."""
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        # build-asan/, build-tsan/, build-asan-glue/: sanitizer builds, the
        # last with an installed copy of the package's Python files.
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS
                             and not d.startswith((".", "build-")))
        for f in sorted(filenames):
            if f in SOURCE_NAMES or os.path.splitext(f)[1] in SOURCE_SUFFIXES:
                found.append(pathlib.Path(dirpath, f).relative_to(ROOT).as_posix())
    return found


def marked_regions() -> set:
    """``(path, name)`` of every region marker (start or end) in the sources."""
    regions = set()
    for path in source_files():
        text = (ROOT / path).read_text(errors="replace")
        regions.update((path, m.group(1)) for m in MARKER_LIKE.finditer(text))
    return regions


def unused_regions(docs: list) -> list:
    """Marked regions that no doc includes, as ``path#name``."""
    used = {s for d in docs for s in snippets(d)}
    return sorted(f"{p}#{n}" for p, n in marked_regions() - used)


def main(argv) -> int:
    check = "--check" in argv
    problems = []
    docs = sorted((ROOT / "docs").glob("*.md"))
    for doc in docs:
        problems += process(doc, write=not check)
    unused = [f"{r}: marked region not included by any doc" for r in unused_regions(docs)]
    for p in problems + unused:
        print(p)
    if check:
        return 1 if problems or unused else 0
    return 1 if unused or any("missing" in p or "not found" in p for p in problems) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
