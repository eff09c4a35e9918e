"""Files whose names hold no rank: each on the empty rank (DESIGN 3.2), each a series of its own (issue 32).

MMEngine's work-dir log and its ``vis_data/scalars.json`` are two copies of rank 0's values (real lines,
tests/fixtures/SOURCES.md): given to ``serve`` as two ``--log-file``s of one ``--run`` they once shared one
series, the second file's steps going back read as a restart.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually

REAL = Path(__file__).parent / "fixtures" / "real"


def test_two_unranked_log_files_are_two_series_on_the_empty_rank_without_a_restart(tmp_path):
    work = tmp_path / "job" / "work"
    (work / "vis_data").mkdir(parents=True)
    log, scalars = work / "20261203_085329.log", work / "vis_data" / "scalars.json"
    shutil.copy(REAL / "mmengine_runner_iter.log", log)
    shutil.copy(REAL / "mmengine_runner_scalars.log", scalars)
    exporter = ExporterProcess("--log-file", str(scalars), "--log-file", str(log), "--run", "job", "--node", "n",
                               wait_for="/-/ready").start()
    try:
        def steps() -> dict[tuple[str, str], float]:
            return {(dict(labels)["run"], dict(labels)["rank"]): value
                    for (name, labels), value in exporter.samples().items() if name == "training_step"}

        # The work-dir log first (the same order whatever the command line's), the other by its own run label.
        eventually(lambda: steps() == {("job", ""): 12.0, ("job/scalars.json", ""): 12.0}, 15,
                   what=lambda: f"{steps()}\n{exporter.output()}")
        assert exporter.total("training_restarts_total") == 0
    finally:
        exporter.stop()
