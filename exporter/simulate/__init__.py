"""Fire drills: realistic msrun runs with injected incidents (``trainlog-exporter simulate``)."""

from exporter.simulate.incidents import Incident, SpecError, parse_incident
from exporter.simulate.scenario import SCHEDULER_LOG, Plan, RunConfig, Slot, plan_run, simulate, worker_log
from exporter.simulate.writer import write_run

__all__ = [
    "SCHEDULER_LOG",
    "Incident",
    "Plan",
    "RunConfig",
    "Slot",
    "SpecError",
    "parse_incident",
    "plan_run",
    "simulate",
    "worker_log",
    "write_run",
]
