"""The series detector kernel alone, for callgrind: 200,000 heavy-tailed losses (an exponential noise, as a small
batch's loss has, on a falling curve) with a jump of +5 one step in a thousand, fed 1,000 at a time.

    PYTHONHASHSEED=0 valgrind --tool=callgrind python -m benchmarks.detector_kernel c|py|none

``none`` builds the series and stops: its instructions, subtracted from the others', leave the kernel's (the C
kernel, or its Python twin). Prints the spikes counted and the jumps put in.
"""

from __future__ import annotations

import random
import sys

from exporter.native import _detectors
from exporter.native import detectors as twin
from exporter.state.detectors.series import FRESH_SPIKES, SeriesConfig, kernel_config


def main(which: str) -> int:
    rng = random.Random(0)
    values = [1.0 / (1 + i / 5000) + rng.expovariate(8) + (5.0 if rng.random() < 0.001 else 0.0)
              for i in range(200_000)]
    if which == "none":
        return 0
    kernel = _detectors if which == "c" else twin
    config, spikes, counted = kernel_config(SeriesConfig()), FRESH_SPIKES, 0
    for start in range(0, len(values), 1000):
        result = kernel.check_series(config, spikes, None, list(range(start, start + 1000)),
                                     values[start:start + 1000])
        counted += result[2]
        spikes = result[4]
    jumps = sum(1 for before, after in zip(values, values[1:], strict=False) if after - before > 3)
    print(f"{counted} spikes counted, {jumps} jumps of +5 put in")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "c"))
