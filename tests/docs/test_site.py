"""The documentation site: `make docs`'s Sphinx build is clean, the API page covers
every public name with a docstring, and the built site works in headless Chromium."""

import functools
import http.server
import importlib
import inspect
import pathlib
import re
import subprocess
import sys
import threading
import time

import pytest

from . import _browser as cdp
from tests.target import HW

# openreg's own internals and tools (tests/target.py)
pytestmark = pytest.mark.openreg_only

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
HTML = DOCS / "_build" / "html"
SCREENSHOTS = DOCS / "_build" / "screenshots"

# The public Python API: torch.openreg and the torch_openreg modules a program
# uses (their __all__, or for torch_openreg.inductor its public functions).
API_MODULES = ["torch_openreg.openreg", "torch_openreg.distributed", "torch_openreg.profiler",
               "torch_openreg.testing", "torch_openreg.ops", "torch_openreg.inductor",
               "torch_openreg.inductor.debug_backend"]
# The pages whose benchmark plots must load in the browser.
PLOT_PAGES = ["performance", "distributed", "profiler"]


def public_names(module):
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [n for n, v in vars(module).items() if not n.startswith("_")
            and (inspect.isfunction(v) or inspect.isclass(v)) and v.__module__ == module.__name__]


def documented_name(module, name):
    """The name the API page gives it: torch.openreg.X for the device module."""
    prefix = "torch.openreg" if module.__name__ == "torch_openreg.openreg" else module.__name__
    return f"{prefix}.{name}"


def sphinx_build(source, out, doctrees):
    """`make docs`'s command, from scratch (-E: a reused environment would not
    repeat the warnings of unchanged pages)."""
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-E", "-q",
         "-d", str(doctrees), str(source), str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    start = time.monotonic()
    r = sphinx_build(DOCS, HTML, tmp_path_factory.mktemp("doctrees"))
    print(f"sphinx build: {time.monotonic() - start:.1f} s")
    return r


@pytest.mark.docs
@pytest.mark.slow
class TestBuild:
    hw_classification = HW.GENERIC

    def test_builds_without_warnings(self, site):
        assert site.returncode == 0 and "WARNING" not in site.stderr, (
            f"sphinx -W failed (exit {site.returncode}):\n{site.stderr[-6000:]}")

    def test_bad_links_and_references_fail_the_build(self, tmp_path):
        # docs/conf.py on a two-page site whose second page links to a missing
        # page, a missing heading and a missing function of torch.openreg.
        src = tmp_path / "src"
        src.mkdir()
        (src / "conf.py").write_text((DOCS / "conf.py").read_text())
        (src / "index.md").write_text("# Index\n\n```{toctree}\npage\n```\n")
        (src / "page.md").write_text(
            "# Page\n\n[a](missing.md), [b](index.md#no-such-heading), "
            "{py:func}`torch.openreg.no_such_function`\n")
        r = sphinx_build(src, tmp_path / "html", tmp_path / "doctrees")
        assert r.returncode != 0
        for target in ("missing.md", "no-such-heading", "torch.openreg.no_such_function"):
            assert re.search(rf"page.md:\d+: WARNING: .*{re.escape(target)}", r.stderr), r.stderr

    def test_toctree_orders_the_pages(self):
        # Overview (architecture, building), then the integration guide in the
        # vendor's order (the route of docs/index.md), then reference.
        pages = toctree_pages()
        assert pages[:2] == ["architecture", "building"]
        route = ["runtime", "device", "memory", "streams", "operators", "amp", "rng",
                 "serialization", "profiler", "distributed", "compile", "testing",
                 "performance", "api"]
        assert [p for p in pages if p in route] == route
        # (A page left out of the toctree, or a toctree entry with no page, is a
        # Sphinx warning: test_builds_without_warnings.)

    def test_every_page_is_built(self, site):
        pages = sorted(p.stem for p in DOCS.glob("*.md"))
        assert {"index", "api", "runtime", "performance"} <= set(pages)
        missing = [p for p in pages if not (HTML / f"{p}.html").exists()]
        assert not missing, missing

    def test_snippet_markers_stay_out_of_the_pages(self, site):
        # The <!-- snippet: ... --> comments that tools/docs_snippets.py keys on
        # are kept in the markdown; in the HTML they are comments, not text.
        html = (HTML / "runtime.html").read_text()
        assert "<!-- snippet: openreg_runtime/" in html
        assert "&lt;!-- snippet:" not in html

    def test_api_page_documents_every_public_name(self, site):
        html = (HTML / "api.html").read_text()
        ids = set(re.findall(r'<dt class="sig[^"]*" id="([^"]+)"', html))
        missing = []
        for modname in API_MODULES:
            module = importlib.import_module(modname)
            names = public_names(module)
            assert names, modname
            missing += [documented_name(module, n) for n in names
                        if documented_name(module, n) not in ids]
        assert not missing, "public names missing from docs/api.md:\n" + "\n".join(missing)


@pytest.mark.docs
class TestDocstrings:
    hw_classification = HW.GENERIC

    @pytest.mark.parametrize("modname", API_MODULES)
    def test_every_public_name_says_what_it_does(self, modname):
        module = importlib.import_module(modname)
        assert (module.__doc__ or "").strip(), f"{modname} has no module docstring"
        bare = []
        for name in public_names(module):
            obj = getattr(module, name)
            # A torch.library custom operator: the function it was defined from.
            obj = getattr(obj, "_init_fn", obj)
            if not (inspect.getdoc(obj) or "").strip():
                bare.append(name)
            if inspect.isclass(obj) and obj.__module__.startswith("torch_openreg"):
                # Public methods and properties the class itself defines.
                for attr, member in vars(obj).items():
                    if attr.startswith("_"):
                        continue
                    target = member.__func__ if isinstance(member, (staticmethod, classmethod)) else member
                    if callable(target) or isinstance(target, property):
                        if not (getattr(target, "__doc__", None) or "").strip():
                            bare.append(f"{name}.{attr}")
        assert not bare, f"{modname}: public names without a docstring: {bare}"


# ------------------------------------------------------------------ the browser
@pytest.fixture(scope="module")
def chromium():
    path, why = cdp.install_chromium()
    if not path:
        pytest.skip(f"no headless Chromium: {why}")
    return path


@pytest.fixture(scope="module")
def served(site):
    """The built site on a free localhost port, for the duration of the module."""
    if site.returncode != 0:
        pytest.fail("the site did not build (see test_builds_without_warnings)")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(HTML)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser(chromium, served):
    with cdp.Browser(chromium, timeout=30) as b:
        yield b


def toctree_pages():
    """Every page of the site, in the order of docs/index.md's toctrees."""
    text = (DOCS / "index.md").read_text()
    pages = []
    for block in re.findall(r"```\{toctree\}\n(.*?)```", text, re.S):
        pages += [l.strip() for l in block.splitlines() if l.strip() and not l.startswith(":")]
    return pages


@pytest.mark.docs
@pytest.mark.slow
class TestInBrowser:
    hw_classification = HW.GENERIC

    @pytest.mark.parametrize("page", ["index", "search", "genindex", *toctree_pages()])
    def test_page_renders_without_console_errors(self, browser, served, page):
        if page == "pytorch-gaps" and not (DOCS / "pytorch-gaps.md").exists():
            pytest.skip("docs/pytorch-gaps.md is not written yet")
        errors = browser.open(served + f"{page}.html")
        assert not errors, f"{page}.html:\n" + "\n".join(errors)
        # Rendered: a page has its text and one title; the search page (empty
        # without a query: test_search_finds_record_stream) its results box.
        if page == "search":
            assert browser.evaluate("!!document.querySelector('article #search-results')")
            return
        text = browser.evaluate("document.querySelector('article').innerText.trim()")
        assert text, f"{page}.html shows nothing"
        assert browser.evaluate("document.querySelectorAll('article h1').length") == 1, page

    def test_search_finds_record_stream(self, browser, served):
        # Typed into the sidebar's search box on the index and submitted.
        assert not browser.open(served + "index.html")
        errors = browser.follow(
            "(() => { const f = document.querySelector('form[action$=\"search.html\"]');"
            " f.querySelector('input[name=q]').value = 'record_stream'; f.requestSubmit(); })()")
        assert not errors, errors
        assert browser.evaluate("location.pathname + location.search").startswith(
            "/search.html?q=record_stream")
        # Sphinx's search runs in the page after the index script loads.
        n = browser.wait_for("document.querySelectorAll('#search-results ul.search li').length",
                             timeout=20)
        assert n, browser.evaluate("document.querySelector('#search-results').innerText")
        hits = browser.evaluate(
            "Array.from(document.querySelectorAll('#search-results ul.search li a'))"
            ".map(a => a.getAttribute('href'))")
        assert any(h.startswith(("sanitizer.html", "streams.html", "memory.html")) for h in hits), hits

    @pytest.mark.parametrize("page", PLOT_PAGES)
    def test_benchmark_plots_load(self, browser, served, page):
        errors = browser.open(served + f"{page}.html")
        assert not errors, errors
        images = browser.evaluate(
            "Promise.all(Array.from(document.images).filter(i => i.src.includes('/_images/'))"
            ".map(i => i.decode().catch(() => null).then(() =>"
            " [i.getAttribute('src'), i.naturalWidth, i.naturalHeight])))")
        assert images, f"{page}.html shows no plot"
        broken = [src for src, w, h in images if not (w > 0 and h > 0)]
        assert not broken, f"{page}.html: plots that did not load: {broken}"

    def test_index_screenshot(self, browser, served):
        errors = browser.open(served + "index.html")
        assert not errors, errors
        # sphinx-copybutton: one copy button per code block.
        blocks, buttons = browser.evaluate(
            "[document.querySelectorAll('article div.highlight').length,"
            " document.querySelectorAll('article div.highlight button.copybtn').length]")
        assert blocks >= 1 and buttons == blocks, (blocks, buttons)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shot = SCREENSHOTS / "index.png"
        browser.screenshot(shot)
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
        print(f"screenshot of the index: {shot}")
