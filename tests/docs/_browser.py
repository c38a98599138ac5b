"""Headless Chromium driven through the Chrome DevTools Protocol, for the site test.

Only what tests/docs/test_site.py needs: open a page, wait for its load event,
collect its console errors, uncaught exceptions and failed loads, evaluate an
expression, take a screenshot. One websocket (websocket-client) to one tab;
every wait is bounded.
"""

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

# Used only by openreg-only tests (tests/target.py).
openreg_only = True

try:
    import websocket  # websocket-client, from requirements-dev.txt
except ImportError:  # the build tests still run; Browser() says what is missing
    websocket = None

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium():
    """Path of a Chromium binary on PATH, or None."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


def install_chromium(timeout=900):
    """Install Debian's ``chromium`` package; return (path or None, why not)."""
    if find_chromium():
        return find_chromium(), ""
    if not shutil.which("apt-get"):
        return None, "chromium is not installed and there is no apt-get to install it"
    if os.geteuid() != 0:
        return None, "chromium is not installed and apt-get needs root (run: apt-get install -y chromium)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return None, f"{' '.join(cmd)} took more than {timeout} s"
        if r.returncode != 0:
            return None, f"{' '.join(cmd)} failed: {r.stderr.strip()[-500:]}"
    path = find_chromium()
    return path, "" if path else "apt-get installed chromium but no binary is on PATH"


class Browser:
    """One headless Chromium process with one tab, driven over CDP."""

    def __init__(self, binary, timeout=30.0, start_timeout=120.0):
        if websocket is None:
            raise RuntimeError("websocket-client is not installed: pip install -r requirements-dev.txt")
        self.timeout = timeout
        # Chromium's first start from a cold disk cache, on a machine that
        # builds in the background (CI), took more than 30 s once.
        self.start_timeout = start_timeout
        self.profile = tempfile.mkdtemp(prefix="openreg-chromium-")
        self.log = tempfile.TemporaryFile("w+")  # Chromium's stderr, shown if it fails to start
        self.proc = subprocess.Popen(
            [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--mute-audio", "--hide-scrollbars",
             "--window-size=1280,900", f"--user-data-dir={self.profile}",
             "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=self.log)
        self.ws = None
        self._id = 0
        self.errors = []
        self._loaded = False
        try:
            port = self._devtools_port()
            self.ws = websocket.create_connection(self._page_ws_url(port), timeout=timeout,
                                                  suppress_origin=True)
            for domain in ("Page", "Runtime", "Log"):
                self.call(f"{domain}.enable")
        except BaseException:
            self.close()
            raise

    # -- process and connection
    def _devtools_port(self):
        # With --remote-debugging-port=0 Chromium picks a free port and writes
        # it on the first line of DevToolsActivePort in its profile folder.
        path = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with open(path) as f:
                    first = f.readline().strip()
                if first.isdigit():
                    return int(first)
            except FileNotFoundError:
                pass
            time.sleep(0.1)
        self.log.seek(0)
        state = (f"it exited with {self.proc.returncode}" if self.proc.poll() is not None
                 else f"still running after {self.start_timeout:.0f} s")
        raise RuntimeError(f"chromium did not start its DevTools server ({state}):\n"
                           + self.log.read()[-3000:])

    def _page_ws_url(self, port):
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise RuntimeError("chromium has no page to drive")

    def close(self):
        if self.ws is not None:
            try:
                self.ws.close()
            except Exception:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- protocol
    def call(self, method, **params):
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self._id += 1
        msg_id = self._id
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while True:
            msg = self._receive(deadline, f"an answer to {method}")
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def _receive(self, deadline, what):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no {what} within {self.timeout} s")
        self.ws.settimeout(remaining)
        try:
            return json.loads(self.ws.recv())
        except websocket.WebSocketTimeoutException:
            raise TimeoutError(f"no {what} within {self.timeout} s") from None

    def _event(self, msg):
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Page.loadEventFired":
            self._loaded = True
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = " ".join(str(a.get("value", a.get("description", ""))) for a in params["args"])
            self.errors.append(f"console.{params['type']}: {args}")
        elif method == "Runtime.exceptionThrown":
            d = params["exceptionDetails"]
            self.errors.append("uncaught: " + d.get("exception", {}).get("description", d["text"]))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            e = params["entry"]
            self.errors.append(f"{e['source']}: {e['text']} {e.get('url', '')}".strip())

    def open(self, url, settle=0.3):
        """Load ``url``; return its console errors, exceptions and failed loads."""
        return self._load(lambda: self.call("Page.navigate", url=url), url, settle)

    def follow(self, expression, settle=0.3):
        """Run ``expression``, which leaves the page (a click, a form submission),
        and wait for the next page as :meth:`open` does."""
        return self._load(lambda: self.evaluate(expression), expression, settle)

    def _load(self, start, what, settle):
        self.errors = []
        self._loaded = False
        start()
        deadline = time.monotonic() + self.timeout
        while not self._loaded:
            self._event(self._receive(deadline, f"load event after {what}"))
        # Errors from scripts that run just after the load event.
        end = time.monotonic() + settle
        while time.monotonic() < end:
            self.ws.settimeout(max(end - time.monotonic(), 0.01))
            try:
                self._event(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                break
        return list(self.errors)

    def evaluate(self, expression):
        """Value of a JavaScript expression in the page (awaited if it is a promise)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression, timeout=None):
        """Poll ``expression`` until it is truthy; return its last value."""
        deadline = time.monotonic() + (timeout or self.timeout)
        value = self.evaluate(expression)
        while not value and time.monotonic() < deadline:
            time.sleep(0.1)
            value = self.evaluate(expression)
        return value

    def screenshot(self, path):
        """Save a PNG of the viewport (1280x900) to ``path``."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
