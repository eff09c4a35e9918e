"""Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe): no library needed.

Chromium reads commands from file descriptor 3 and writes answers and events to 4, each a
JSON message ended by a NUL byte.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support.browser import FLAGS
from tests.support.tools import require_tool


class Browser:
    """One page in a headless Chromium: ``evaluate`` JavaScript in it, ``close`` it."""

    def __init__(self, profile: Path, width: int = 1000, height: int = 500) -> None:
        binary = require_tool("chromium", "Debian package 'chromium'; scripts/install-system-deps.sh installs it")
        commands_read, self._commands = os.pipe()
        self._answers, answers_write = os.pipe()

        def pipes_as_3_and_4() -> None:
            # Out of the way first (either may be 3 or 4 already); dup2 makes 3 and 4 inheritable,
            # every other descriptor of ours is close-on-exec.
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (commands_read, answers_write)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self._process = subprocess.Popen(  # noqa: PLW1509 - preexec_fn: the only way to place the pipes at 3 and 4
            [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "--remote-debugging-pipe", "about:blank"],
            close_fds=False, preexec_fn=pipes_as_3_and_4, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(commands_read)
        os.close(answers_write)
        self._buffer = b""
        self._next_id = 0
        target = self._call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def navigate(self, url: str, timeout: float = 20.0) -> None:
        """Open ``url`` and wait until its document has loaded."""
        self._call("Page.navigate", session=True, url=url)
        deadline = time.monotonic() + timeout
        while self.evaluate("document.readyState") != "complete" or self.evaluate("location.href") != url:
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} did not load within {timeout} s")
            time.sleep(0.1)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        answer = self._call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                            awaitPromise=True)
        if "exceptionDetails" in answer:
            raise AssertionError(f"{expression!r} threw: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def close(self) -> None:
        self._process.kill()
        self._process.wait(10)
        os.close(self._commands)
        os.close(self._answers)

    def _call(self, method: str, session: bool = False, **params: Any) -> dict:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read_message()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise AssertionError(f"{method}: {answer['error']}")
                return answer["result"]

    def _read_message(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._answers, 1 << 16)
            if not chunk:
                raise AssertionError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
