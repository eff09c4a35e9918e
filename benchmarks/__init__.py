"""Speed and memory benchmarks of trainlog-exporter; run from the repository root: ``python -m benchmarks.run``."""
