"""Headless Chromium (Debian's `chromium`) as a user's browser."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.skip("chromium is not installed (Debian package 'chromium'; .ci/run installs it)")
    return subprocess.run([binary, *_FLAGS, f"--user-data-dir={profile}", *args, url],
                          capture_output=True, text=True, timeout=60, check=True)
