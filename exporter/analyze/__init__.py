"""``analyze``: the post-mortem of finished logs (sources -> the exporter's parse and state -> report -> renderers)."""
