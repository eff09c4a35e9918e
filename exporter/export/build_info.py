"""What ``trainlog_build_info`` says: the version, the source revision and the Python running it."""

from __future__ import annotations

import functools
import platform
import subprocess
from pathlib import Path

from exporter import __version__

_PACKAGE = Path(__file__).resolve().parents[1]


@functools.cache
def build_info() -> dict[str, str]:
    """``{"version", "revision", "python"}``, worked out once per process."""
    return {"version": __version__, "revision": _revision(), "python": platform.python_version()}


def _revision() -> str:
    # A checkout (pip install -e, make run) knows its commit; an installed wheel does not
    # carry one, and says so rather than guess.
    try:
        result = subprocess.run(["git", "-C", str(_PACKAGE), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else "unknown"
