"""The glue's kernels are laid out by job (docs/architecture.md, "The glue's
kernels, by job"): every file of openreg_python/csrc/aten/ is in a job's folder,
a folder includes only from the folders before it in LAYERS, and no file of the
glue passes 850 lines."""

import pathlib
import re

import pytest

from tests._subprocess import REPO
from tests.target import HW

# openreg's own tree (tests/target.py)
pytestmark = pytest.mark.openreg_only

ROOT = pathlib.Path(REPO)
GLUE = ROOT / "openreg_python" / "csrc"
ATEN = GLUE / "aten"
# Bottom first: a folder includes only from folders listed before it.
LAYERS = ["core", "graph", "layout", "random", "kernels", "attention", "custom_ops", "sparse"]
MAX_LINES = 850
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(folder):
    return sorted(p for p in folder.rglob("*") if p.suffix in (".h", ".cpp"))


def folder_of(path):
    rel = path.relative_to(ATEN)
    return rel.parts[0] if len(rel.parts) > 1 else None


@pytest.mark.template
class TestGlueLayout:
    hw_classification = HW.GENERIC

    def test_every_file_is_in_a_jobs_folder(self):
        loose = [p.name for p in ATEN.iterdir() if p.is_file()]
        assert loose == [], f"files outside a job's folder: {loose}"
        assert sorted(p.name for p in ATEN.iterdir() if p.is_dir()) == sorted(LAYERS)

    def test_no_include_runs_back_up(self):
        bad = []
        for path in sources(ATEN):
            mine = LAYERS.index(folder_of(path))
            for name in INCLUDE.findall(path.read_text()):
                if name.startswith("aten/"):
                    theirs = name.split("/")[1]
                    if LAYERS.index(theirs) > mine:
                        bad.append(f"{path.relative_to(ATEN)} includes {name}")
                elif "/" not in name and not (path.parent / name).exists() and \
                        not (GLUE / name).exists() and not name.endswith(".inc"):
                    bad.append(f"{path.relative_to(ATEN)} includes {name}, found nowhere")
                elif name.startswith(".."):
                    bad.append(f"{path.relative_to(ATEN)} includes {name} by a relative path "
                               f"(write it from csrc/: aten/<folder>/... or runtime/...)")
        assert not bad, "\n".join(bad)

    def test_the_check_finds_an_include_that_runs_back_up(self, tmp_path):
        text = '#include "aten/kernels/CpuKernel.h"\n'
        assert [n for n in INCLUDE.findall(text)
                if n.startswith("aten/") and LAYERS.index(n.split("/")[1]) > 0]

    def test_no_file_of_the_glue_passes_850_lines(self):
        long = {str(p.relative_to(ROOT)): n for p in sources(GLUE)
                if (n := len(p.read_text().splitlines())) > MAX_LINES}
        assert not long, long
