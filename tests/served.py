"""`amaris serve` as a real subprocess on 127.0.0.1, for the tests: started, its URL read from the line
it prints, its stderr collected, and stopped with SIGTERM (the way a supervisor stops it)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import process_env

URL_LINE = re.compile(r"amaris serve listening: (http://\S+)")


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str = ""
    lines: list[str] = field(default_factory=list)

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
            raise AssertionError(f"amaris serve did not stop within {timeout}s after signal {sig}:\n{self.stderr}") from None

    def wait_for_line(self, pattern: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if re.search(pattern, line):
                    return line
            if self.proc.poll() is not None and not self._reader_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} within {timeout}s:\n{self.stderr}")

    def _reader_alive(self) -> bool:
        return any(t.name == f"serve-stderr-{self.proc.pid}" and t.is_alive() for t in threading.enumerate())


serve_env = process_env  # the environment of `amaris serve` is a subprocess's (tests/conftest.py)


def start_server(run: Path, env: dict[str, str], *args: object) -> Served:
    proc = subprocess.Popen([sys.executable, "-m", "amaris_cli", "serve", "--run", str(run), "--port", "0",
                             *map(str, args)], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    served = Served(proc)

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            served.lines.append(line.rstrip("\n"))

    threading.Thread(target=read, name=f"serve-stderr-{proc.pid}", daemon=True).start()
    try:
        served.url = URL_LINE.search(served.wait_for_line("amaris serve listening: ")).group(1)  # type: ignore[union-attr]
    except BaseException:
        served.stop(signal.SIGKILL)
        raise
    return served


@contextmanager
def served(run: Path, judge, *args: object, env: dict[str, str] | None = None) -> Iterator[Served]:
    server = start_server(run, env or serve_env(judge), *args)
    try:
        yield server
    except BaseException as exc:
        exc.add_note(f"amaris serve's stderr:\n{server.stderr}")  # what the server said is the first clue
        raise
    finally:
        code = server.stop()
        assert code == 0, f"amaris serve exited {code} on SIGTERM:\n{server.stderr}"
        assert "Traceback" not in server.stderr and "never retrieved" not in server.stderr, server.stderr
