"""Headless Chromium (Debian's `chromium`) as a user's browser."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.tools import require_tool

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
          "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    binary = require_tool("chromium", "Debian package 'chromium'; scripts/install-system-deps.sh installs it")
    return subprocess.run([binary, *FLAGS, f"--user-data-dir={profile}", *args, url],
                          capture_output=True, text=True, timeout=60, check=True)
