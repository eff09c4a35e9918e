"""``serve --demo``: a live simulated run in a temporary directory, for a first look."""

from __future__ import annotations

import shutil
import tempfile
import threading
from datetime import datetime
from pathlib import Path

from exporter.simulate.incidents import parse_incident
from exporter.simulate.scenario import RunConfig, simulate
from exporter.simulate.writer import write_run

# A long healthy run with two things to look at: rank 5 turns slow after half a minute
# and every rank waits for it (training_step_duration_seconds, training_anomalies_total
# {kind="slowdown"} 20 steps later), and the loss spikes once at step 120
# (training_anomalies_total{kind="loss_spike"}).
DEMO_INCIDENTS = ("straggler:5@30", "spike@120")
DEMO_RANKS, DEMO_STEPS, DEMO_STEP_INTERVAL = 8, 100_000, 1.0


class DemoRun:
    """Writes the demo run on a background thread; ``log_dir``'s parent names the run "demo"."""

    def __init__(self, step_interval: float = DEMO_STEP_INTERVAL) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="trainlog-demo-"))
        self.log_dir = self._root / "demo" / "msrun_log"
        self.log_dir.mkdir(parents=True)
        config = RunConfig(DEMO_RANKS, DEMO_STEPS, tuple(parse_incident(spec) for spec in DEMO_INCIDENTS),
                           start=datetime.now().replace(microsecond=0), seconds_per_slot=step_interval)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=write_run, name="demo", daemon=True,
                                        args=(simulate(config), self.log_dir, step_interval, self._stop))

    def start(self) -> None:
        self._thread.start()

    def pause(self) -> None:
        """Stop writing and keep the files (a test looks at the run as it stands)."""
        self._stop.set()
        self._thread.join(5)

    def stop(self) -> None:
        self.pause()
        shutil.rmtree(self._root, ignore_errors=True)
