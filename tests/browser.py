"""Open a local HTML file in headless Chromium with networking disabled, test-only.

Drives the browser through the DevTools protocol over ``--remote-debugging-pipe``
(NUL-delimited JSON on file descriptors 3 and 4), so it needs no extra Python
package (no websocket client) and no port. Network access is cut three ways: a
dead proxy, a resolver that maps every host to NOTFOUND, and a record of every
request the page makes (anything other than ``file:``/``data:``/``blob:`` is
reported in ``PageResult.network_requests``).

Get the browser, without root, with::

    bash scripts/get_chromium.sh   # a Chromium on PATH, or Debian's unpacked into a cache

Usage::

    res = render_page(Path("report.html"), screenshot=Path("test-artifacts/r.png"))
    assert not res.console_errors
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_NAMES = (
    "chromium",
    "chromium-browser",
    "google-chrome",
    "chrome",
    "chrome-headless-shell",
)


def find_chromium() -> str | None:
    """Path of a Chromium-family browser, or None (``DOMINO_PROF_CHROMIUM`` overrides);
    else one on PATH, else the newest that scripts/get_chromium.sh unpacked in its cache."""
    env = os.environ.get("DOMINO_PROF_CHROMIUM")
    if env:
        return env
    for name in CHROMIUM_NAMES:
        p = shutil.which(name)
        if p:
            return p
    cache = os.environ.get("DOMINO_PROF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "domino-prof")
    found = sorted(Path(cache).glob("chromium-*/chromium"), key=lambda p: p.stat().st_mtime)
    return str(found[-1]) if found else None


@dataclass
class PageResult:
    console_errors: list[str] = field(default_factory=list)
    console_messages: list[str] = field(default_factory=list)
    network_requests: list[str] = field(default_factory=list)  # non-local URLs requested
    value: object = None  # result of the probe expression
    screenshot: Path | None = None


class _Pipe:
    """Minimal CDP client over the two pipe fds."""

    def __init__(self, proc: subprocess.Popen, wfd: int, rfd: int) -> None:
        self.proc = proc
        self.w = os.fdopen(wfd, "wb", buffering=0)
        self.r = os.fdopen(rfd, "rb", buffering=0)
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []

    def _read_msg(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from chromium over the DevTools pipe")
            chunk = self.r.read(1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe (did it crash?)")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def send(
        self,
        method: str,
        params: dict | None = None,
        *,
        session: str | None = None,
        timeout: float = 60.0,
    ) -> dict:
        self.next_id += 1
        mid = self.next_id
        msg: dict = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.w.write(json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_msg(deadline)
            if m.get("id") == mid:
                if "error" in m:
                    raise RuntimeError(f"CDP {method} failed: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(
        self, method: str, *, timeout: float = 60.0, session: str | None = None
    ) -> dict:
        """The next ``method`` event (of ``session`` if given; one page's session in a
        browser shared by many pages)."""

        def ours(m: dict) -> bool:
            return m.get("method") == method and (session is None or m.get("sessionId") == session)

        deadline = time.monotonic() + timeout
        for i, m in enumerate(self.events):
            if ours(m):
                del self.events[i]
                return m
        while True:
            m = self._read_msg(deadline)
            if ours(m):
                return m
            self.events.append(m)


def _describe_console(ev: dict) -> tuple[str, str]:
    method = ev.get("method")
    p = ev.get("params", {})
    if method == "Runtime.consoleAPICalled":
        text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
        return p.get("type", "log"), text
    if method == "Runtime.exceptionThrown":
        d = p.get("exceptionDetails", {})
        exc = d.get("exception", {}).get("description") or d.get("text", "")
        return "error", f"uncaught exception: {exc}"
    if method == "Log.entryAdded":
        e = p.get("entry", {})
        return e.get("level", "info"), f"{e.get('source')}: {e.get('text')} {e.get('url', '')}"
    return "", ""


class Browser:
    """One headless Chromium (its DevTools pipe), opened once and used for many pages:
    each page gets its own target (a fresh renderer) and session, closed after it, so
    pages share nothing but the browser process. Starting and closing Chromium is ~2-3 s
    of a page's time on 2 cores; tests/test_report_browser.py renders 7 pages with one.
    Use as a context manager."""

    def __init__(self, width: int = 1400, height: int = 900) -> None:
        exe = find_chromium()
        if exe is None:
            raise RuntimeError("chromium not found; bash scripts/get_chromium.sh gets one")
        self.profile = tempfile.mkdtemp(prefix="dp-chromium-")
        # fds 3 (browser reads) and 4 (browser writes) are the DevTools pipe.
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        args = [
            exe, "--headless=new", "--disable-gpu", "--no-sandbox", "--no-first-run",
            "--no-default-browser-check", "--disable-extensions", "--disable-sync",
            "--disable-background-networking", "--disable-component-update",
            "--disable-dev-shm-usage", "--mute-audio", "--hide-scrollbars",
            "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
            "--remote-debugging-pipe", "about:blank",
        ]  # fmt: skip

        def _fds() -> None:  # in the child: put the pipe ends on fds 3 and 4, inheritable
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)  # move clear of 3/4 first
            os.dup2(a, 3, inheritable=True)
            os.dup2(b, 4, inheritable=True)

        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_fds,  # noqa: PLW1509 - the only way to place the pipe on fds 3/4
            close_fds=False,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.cdp = _Pipe(self.proc, to_browser_w, from_browser_r)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # best effort; the process is killed below
            self.cdp.send("Browser.close", timeout=10)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.cdp.w.close()
        self.cdp.r.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def render(
        self,
        html: Path,
        *,
        probe: str | None = None,
        screenshot: Path | None = None,
        width: int = 1400,
        height: int = 900,
        settle_s: float = 0.5,
        timeout: float = 90.0,
        clip: tuple[int, int, int, int] | None = None,
    ) -> PageResult:
        """``render_page`` in this browser: a new target for the page, closed after it;
        only the events of the page's own session are read."""
        cdp = self.cdp
        url = Path(html).resolve().as_uri()
        cdp.events.clear()  # nothing of an earlier page (its target is closed)
        res = PageResult()
        tgt = cdp.send("Target.createTarget", {"url": "about:blank"})
        try:
            sess = cdp.send(
                "Target.attachToTarget", {"targetId": tgt["targetId"], "flatten": True}
            )["sessionId"]
            for dom in ("Runtime.enable", "Log.enable", "Page.enable", "Network.enable"):
                cdp.send(dom, session=sess)
            cdp.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                session=sess,
            )
            cdp.send("Page.navigate", {"url": url}, session=sess)
            cdp.wait_event("Page.loadEventFired", timeout=timeout, session=sess)
            time.sleep(settle_s)
            if probe is not None:
                r = cdp.send(
                    "Runtime.evaluate",
                    {"expression": probe, "returnByValue": True, "awaitPromise": True},
                    session=sess,
                    timeout=timeout,
                )
                if "exceptionDetails" in r:
                    raise RuntimeError(f"probe failed: {r['exceptionDetails']}")
                res.value = r.get("result", {}).get("value")
            if screenshot is not None:
                import base64

                params: dict = {"format": "png", "captureBeyondViewport": True}
                if clip is not None:
                    params["clip"] = dict(zip(("x", "y", "width", "height"), clip), scale=1)
                shot = cdp.send("Page.captureScreenshot", params, session=sess, timeout=timeout)
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                screenshot.write_bytes(base64.b64decode(shot["data"]))
                res.screenshot = screenshot
            # Drain anything already queued (console messages arrive asynchronously).
            cdp.send("Runtime.evaluate", {"expression": "1"}, session=sess)
            for ev in cdp.events:
                if ev.get("sessionId") != sess:
                    continue
                if ev.get("method") == "Network.requestWillBeSent":
                    u = ev["params"]["request"]["url"]
                    if not u.startswith(("file:", "data:", "blob:", "about:")):
                        res.network_requests.append(u)
                    continue
                level, text = _describe_console(ev)
                if not level:
                    continue
                res.console_messages.append(f"[{level}] {text}")
                if level in ("error", "assert"):
                    res.console_errors.append(text)
        finally:
            with contextlib.suppress(Exception):
                cdp.send("Target.closeTarget", {"targetId": tgt["targetId"]}, timeout=10)
            cdp.events.clear()
        return res


def render_page(
    html: Path,
    *,
    probe: str | None = None,
    screenshot: Path | None = None,
    width: int = 1400,
    height: int = 900,
    settle_s: float = 0.5,
    timeout: float = 90.0,
    clip: tuple[int, int, int, int] | None = None,
    browser: Browser | None = None,
) -> PageResult:
    """Load ``html`` from a file:// URL, evaluate ``probe`` (a JS expression, may be
    a Promise; its JSON value is returned), optionally save a full-page PNG. In
    ``browser`` if given (see ``Browser``), else in a Chromium started for this page."""
    kw = dict(probe=probe, screenshot=screenshot, width=width, height=height,
              settle_s=settle_s, timeout=timeout, clip=clip)  # fmt: skip
    if browser is not None:
        return browser.render(html, **kw)
    with Browser(width, height) as b:
        return b.render(html, **kw)
