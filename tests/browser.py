"""A small Chrome DevTools Protocol client for tests: Debian's chromium, headless, driven over
--remote-debugging-pipe (NUL-separated JSON on file descriptors 3 and 4), so no websocket library and
no browser download are needed. Every wait is bounded.

Also a "proxy" that only counts: the browser is pointed at it for every URL, so any request the page
tries to make is seen there (and fails).
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars"]

# Puts the pipe ends where chromium expects them (fd 3: commands in, fd 4: answers out), then execs it.
_EXEC = """import fcntl, os, sys
src_in, src_out = int(sys.argv[1]), int(sys.argv[2])
a, b = fcntl.fcntl(src_in, fcntl.F_DUPFD, 10), fcntl.fcntl(src_out, fcntl.F_DUPFD, 10)
os.close(src_in); os.close(src_out)
os.dup2(a, 3); os.dup2(b, 4); os.close(a); os.close(b)
os.execv(sys.argv[3], sys.argv[3:])
"""


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


class CountingProxy:
    """Accepts connections on 127.0.0.1 and records each request line; answers 502."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stopping = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(1)
                try:
                    first = conn.recv(4096).split(b"\r\n", 1)[0].decode(errors="replace")
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                except OSError:
                    first = "(connection without a request line)"
                self.requests.append(first)

    def close(self) -> None:
        self.stopping = True
        self.thread.join(timeout=2)
        self.sock.close()


class Browser:
    def __init__(self, executable: str, profile: Path, extra_flags: list[str] | None = None, log: Path | None = None) -> None:
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()
        self.log = log or profile.with_suffix(".log")
        args = [sys.executable, "-c", _EXEC, str(to_child_r), str(from_child_w), executable, *FLAGS,
                f"--user-data-dir={profile}", "--remote-debugging-pipe", *(extra_flags or []), "about:blank"]
        with open(self.log, "wb") as log_file:
            self.proc = subprocess.Popen(args, pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL,
                                         stdout=log_file, stderr=log_file)
        os.close(to_child_r)
        os.close(from_child_w)
        self._next = 0
        self._answers: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._r, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self._lock:
                        box = self._answers.get(message["id"])
                    if box is not None:
                        box.put(message)
                else:
                    self.events.append(message)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 30) -> dict[str, Any]:
        with self._lock:
            self._next += 1
            ident = self._next
            box: queue.Queue[dict[str, Any]] = queue.Queue()
            self._answers[ident] = box
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._w, json.dumps(message).encode() + b"\0")
        try:
            answer = box.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer to {method} within {timeout}s (browser log: {self.log})") from None
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    def open(self, url: str, width: int = 1280, height: int = 900) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.send(f"{domain}.enable", session=session)
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False}, session=session)
        self.send("Page.navigate", {"url": url}, session=session)
        return page

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (TimeoutError, RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for fd in (self._w, self._r):
            try:
                os.close(fd)
            except OSError:
                pass


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def eval(self, expression: str, timeout: float = 30) -> Any:
        """Evaluate a JS expression (promises awaited) and return its JSON value."""
        result = self.browser.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                                        "returnByValue": True}, session=self.session, timeout=timeout)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, expression: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while True:  # errors while the page is still loading (no body yet) count as "not yet"
            value = self.eval(f"(() => {{ try {{ return ({expression}); }} catch (e) {{ return null; }} }})()")
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout}s for {expression}")
            time.sleep(0.05)

    def screenshot(self, path: Path, width: int = 1280) -> Path:
        """The whole page (up to 12,000 pixels high) as PNG."""
        self.browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": 900, "deviceScaleFactor": 1,
                                                                 "mobile": False}, session=self.session)
        height = int(self.eval("Math.ceil(document.documentElement.scrollHeight)") or 900)
        self.browser.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": min(height, 12000),
                                                                 "deviceScaleFactor": 1, "mobile": False},
                          session=self.session)
        shot = self.browser.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                                 session=self.session)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def events(self, method: str) -> list[dict[str, Any]]:
        return [e["params"] for e in self.browser.events if e.get("method") == method and e.get("sessionId") == self.session]
