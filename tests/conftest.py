"""Shared test setup."""

from __future__ import annotations

import pytest

# make test runs the files on every core (pytest-xdist, --dist loadfile --no-loadscope-reorder: a worker takes the
# next file when it is almost done with its own), the longest first: a long file taken last would keep one worker
# busy while the others idle. The order of their durations (pytest --durations, a 2-vCPU machine); the other files
# follow in their own order. Only the order depends on it.
LONGEST_FILES = (
    "tests/real/test_torchrun_ddp.py",
    "tests/test_hostile_input.py",
    "tests/real/test_msrun.py",
    "tests/test_block_parse.py",
    "tests/real/test_hf_trainer.py",
    "tests/real/test_stall.py",
    "tests/test_rules.py",
    "tests/test_carriage.py",
    "tests/real/test_lightning.py",
    "tests/test_benchmarks_smoke.py",
    "tests/test_e2e_alerts.py",
    "tests/real/test_trl.py",
    "tests/test_wheel_install.py",
    "tests/real/test_mmengine.py",
    "tests/test_rotation_drill.py",
    "tests/test_analyze_limits.py",
    "tests/test_real_replay_alerts.py",
    "tests/test_fuzz_parsers.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    order = {path: index for index, path in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: order.get(item.nodeid.split("::", 1)[0], len(order)))


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
