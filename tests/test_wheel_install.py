"""The image's install path without Docker: wheel, fresh virtual environment, console script.

SLOW (about 30-60 s, mostly pip): CI has no Docker engine, so this is how the Dockerfile's
logic is exercised. The build context is exactly what the Dockerfile's build stage COPYs,
the wheels are built with the same `pip wheel` and installed with the same offline
`pip install --no-index --find-links`, and the installed console script must serve the
example run without writing anything next to itself (the image's root is read-only).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dockerfile import build_stage_copies
from tests.support.exporter_process import REPO, ExporterProcess
from tests.support.net import eventually, sample, scrape
from tests.support.runs import copy_example

# The installed package, never the checkout: nothing from the repository on sys.path.
ISOLATED = {"PYTHONPATH": "", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/nonexistent"}


def pip(python: Path | str, *args: str, quiet: bool = True, constraint: Path | None = None) -> str:
    """Run pip; returns what it printed (the build backend's warnings too, unless quiet). ``constraint``:
    as the Dockerfile gives it, in PIP_CONSTRAINT, which the isolated build environment sees too."""
    environment = {**os.environ, "PIP_CONSTRAINT": str(constraint)} if constraint else None
    result = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *(["--quiet"] * quiet), *args],
                            capture_output=True, text=True, timeout=300, env=environment)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def wheel_build(tmp_path_factory) -> tuple[Path, str]:
    """The project's wheel built from the Dockerfile's build context: (wheel directory, pip's output)."""
    root = tmp_path_factory.mktemp("image")
    context = root / "context"
    context.mkdir()
    for source in build_stage_copies(REPO / "Dockerfile"):
        if (REPO / source).is_dir():
            # Not the checkout's own builds: the wheel must compile the speedups itself (.dockerignore too).
            shutil.copytree(REPO / source, context / source, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        else:
            shutil.copy2(REPO / source, context / source)
    wheels = root / "wheels"
    output = pip(sys.executable, "wheel", "--wheel-dir", str(wheels), str(context), quiet=False,
                 constraint=context / "constraints.txt")
    return wheels, output


@pytest.fixture(scope="module")
def installed(wheel_build, tmp_path_factory) -> Path:
    """A fresh venv with the project installed from its wheel, as the Dockerfile does; returns it."""
    wheels, _ = wheel_build
    venv = tmp_path_factory.mktemp("image") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip(venv / "bin" / "python", "install", "--no-index", f"--find-links={wheels}", "trainlog-exporter")
    return venv


def test_the_build_prints_no_setuptools_warning(wheel_build):
    _, output = wheel_build
    warnings = [line for line in output.splitlines() if "Warning" in line]
    assert not warnings, "\n".join(warnings)


def tree_snapshot(directory: Path) -> dict[str, float]:
    return {str(path): path.stat().st_mtime for path in directory.rglob("*") if not path.is_symlink()}


def test_console_script_reports_the_project_version(installed):
    result = subprocess.run([str(installed / "bin" / "trainlog-exporter"), "--version"], capture_output=True,
                            text=True, env={**os.environ, **ISOLATED}, timeout=60)
    assert result.returncode == 0, result.stderr
    from exporter import __version__

    assert result.stdout.split() == ["trainlog-exporter", __version__]


def test_installed_package_is_the_wheel_not_the_checkout(installed):
    location = subprocess.run([str(installed / "bin" / "python"), "-c", "import exporter; print(exporter.__file__)"],
                              capture_output=True, text=True, env={**os.environ, **ISOLATED}, cwd="/", timeout=60)
    assert Path(location.stdout.strip()).is_relative_to(installed), location.stdout + location.stderr


def test_the_wheel_carries_the_native_kernels(installed):
    probe = "from exporter import native; import json; print(json.dumps(native.available()))"
    result = subprocess.run([str(installed / "bin" / "python"), "-c", probe], capture_output=True, text=True,
                            env={**os.environ, **ISOLATED}, cwd="/", timeout=60)
    built = json.loads(result.stdout or "{}")
    assert built and all(built.values()), result.stdout + result.stderr


def test_console_script_serves_without_writing_next_to_itself(installed, tmp_path):
    log_dir = copy_example(tmp_path)
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    before = tree_snapshot(installed)
    with ExporterProcess("--log-dir", str(log_dir), program=[str(installed / "bin" / "trainlog-exporter")],
                         env=ISOLATED, cwd=workdir) as exporter:
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="7") == 200, 15,
                   what="the example run in /metrics")
    assert tree_snapshot(installed) == before
    assert list(workdir.iterdir()) == []
