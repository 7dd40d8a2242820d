"""A headless chromium driven over the DevTools protocol, for the stage viewer's tests.

Chromium's ``--remote-debugging-pipe`` speaks the protocol as NUL-separated JSON on file
descriptors 3 (commands in) and 4 (replies and events out), so the driver is a pipe, a
reader thread and JSON: no websocket client, no browser download, nothing from PyPI.
``find()`` returns the system's chromium (CI installs Debian's) or None; ``LIMN_CHROMIUM``
names the one to use, and then no other is looked for.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading

FLAGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
]


def find() -> str | None:
    if os.environ.get("LIMN_CHROMIUM"):
        return shutil.which(os.environ["LIMN_CHROMIUM"])
    for name in ("chromium", "chromium-browser", "chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


class Chromium:
    """One browser with one page; ``errors`` collects console errors and exceptions."""

    def __init__(self, exe: str, width: int = 1400, height: int = 900):
        self.profile = tempfile.mkdtemp(prefix="limn-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._out_r, out_w = os.pipe()

        def fds():  # the protocol's descriptors, as chromium expects them
            a, b = os.dup(cmd_r), os.dup(out_w)  # above 4, so neither dup2 clobbers the other
            os.dup2(a, 3)
            os.dup2(b, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            preexec_fn=fds,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(cmd_r)
        os.close(out_w)
        self._next = 0
        self._replies: dict[int, queue.Queue] = {}
        self._lock = threading.Lock()
        self.events: queue.Queue = queue.Queue()
        self.errors: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    # ---- the protocol ---------------------------------------------------------------

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = os.read(self._out_r, 1 << 16)
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    waiting = self._replies.get(msg["id"])
                    if waiting is not None:
                        waiting.put(msg)
                else:
                    self._event(msg)

    def _event(self, msg: dict) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.errors.append(d.get("exception", {}).get("description") or d.get("text", ""))
        elif method == "Runtime.consoleAPICalled" and p.get("type") == "error":
            self.errors.append(
                " ".join(str(a.get("value", a.get("description"))) for a in p["args"])
            )
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            self.errors.append(p["entry"]["text"])
        self.events.put(msg)

    def call(self, method: str, session: str | None = None, timeout: float = 60, **params):
        with self._lock:
            self._next += 1
            i = self._next
            self._replies[i] = queue.Queue()
        msg = {"id": i, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        try:
            reply = self._replies[i].get(timeout=timeout) if timeout else None
        finally:
            self._replies.pop(i)
        if reply and "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply["result"] if reply else None

    def send(self, method: str, **params):
        """A command to the page."""
        return self.call(method, self.session, **params)

    # ---- what the tests do --------------------------------------------------------------

    def open(self, url: str, ready: str = "document.body && document.body.dataset.ready") -> None:
        """Load ``url`` and wait until the ``ready`` expression is true."""
        self.send("Page.navigate", url=url)
        self.wait_for(ready)

    def eval(self, expression: str):
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30) -> None:
        import time

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if self.eval(f"!!({expression})"):
                    return
            except RuntimeError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"page never had {expression}")

    def click(self, selector: str) -> None:
        """A real mouse click at the centre of the first element ``selector`` matches."""
        box = self.eval(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            " if (!el) return null; el.scrollIntoView({block: 'center'});"
            " const r = el.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        if box is None:
            raise LookupError(f"no element matches {selector}")
        for kind in ("mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                type=kind,
                x=box[0],
                y=box[1],
                button="left",
                clickCount=1,
            )

    def screenshot(self, path: str) -> None:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._cmd_w)
        shutil.rmtree(self.profile, ignore_errors=True)
