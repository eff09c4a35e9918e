"""The exposition of the bundled example run, against a golden file updated on purpose only.

Regenerate after an intended change with: UPDATE_GOLDEN=1 python -m pytest tests/test_golden_exposition.py
"""

from __future__ import annotations

import os
from pathlib import Path

from exporter.export.families import ScrapeTime
from tests.support.runs import copy_example, exposition, read_once

GOLDEN = Path(__file__).parent / "golden" / "example-run.prom"
# trainlog_build_info's labels change with every commit and Python: pinned here, checked for
# their real values in tests/test_exposition_formats.py. (The process_* families are not
# TrainingCollector's: they are checked there too.)
PINNED_BUILD = ScrapeTime(build_info=lambda: {"version": "VERSION", "revision": "REVISION", "python": "PYTHON"})


def test_example_run_exposition_matches_golden(tmp_path):
    text = exposition(read_once(copy_example(tmp_path)), PINNED_BUILD)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "exposition changed; if intended, regenerate with UPDATE_GOLDEN=1"
