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
cannot drift from code).
"""

import pathlib
import re
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent
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


def main(argv) -> int:
    check = "--check" in argv
    problems = []
    for doc in sorted((ROOT / "docs").glob("*.md")):
        problems += process(doc, write=not check)
    for p in problems:
        print(p)
    if check:
        return 1 if problems else 0
    return 1 if any("missing" in p or "not found" in p for p in problems) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
