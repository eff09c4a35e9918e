"""trainlog-exporter: training logs in, per-rank Prometheus metrics out."""

__version__ = "0.1.0"
