# The detector kernel (detectors.c); its twin and definition: detectors.py.
from collections.abc import Sequence

from exporter.native.detectors import PlateauState, SeriesCheck, SpikeState

def check_series(config: tuple, spikes: SpikeState | None, plateau: PlateauState | None,
                 steps: Sequence[int | None], values: Sequence[float]) -> SeriesCheck: ...
