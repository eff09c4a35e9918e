"""Shared test setup."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_state_directory(tmp_path_factory, monkeypatch):
    # The exporter checkpoints to $XDG_STATE_HOME by default: each test (and the processes it
    # starts, which inherit the environment) gets its own, so no run resumes another's state.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("xdg-state")))


@pytest.fixture
def log_dir(tmp_path):
    """An empty log directory whose parent names the run: ``<tmp>/run/logs``."""
    directory = tmp_path / "run" / "logs"
    directory.mkdir(parents=True)
    return directory
