"""``analyze`` never ends in a traceback, and reads every kind of failure the exporter knows.

A fuzz target drives the whole command (JSON, text, Markdown and the CSV) over generated log
directories that mix step lines, the real line of every failure signature, junk bytes and
lines cut short; then one log per signature, its real line after healthy steps, must give a
finding of the signature's kind on the file's rank.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from datetime import datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter import kinds
from exporter.analyze.command import run_analyze
from exporter.parse import signatures
from tests.test_analyze import keyvalue_lines

EXAMPLES = int(os.environ.get("TRAINLOG_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
START = datetime(2026, 6, 9, 10, 20, 30)
STEP_LINES = keyvalue_lines(0, range(1, 41), START)
FAILURES = [signature.example for signature in signatures.SIGNATURES]
MINDFORMERS = ["2026-06-09 10:20:31,000 - mindformers[mindformers/core/callback/callback.py:351] - INFO - "
               "{ Epoch:[  1/  1], step:[    2/  200], loss: 10.512, per_step_time: 850ms, lr: 1e-05, "
               "overflow cond: False, loss_scale: 1.0, global_norm: [1.23], train_throughput_per_npu: 2.1T }",
               "Running MindFormers in PYNATIVE_MODE."]
LINE = st.one_of(st.sampled_from(STEP_LINES + FAILURES + MINDFORMERS),
                 st.sampled_from(STEP_LINES + FAILURES).flatmap(lambda line: st.integers(0, len(line)).map(
                     lambda cut: line[:cut])),  # a line cut short
                 st.binary(max_size=60).map(lambda junk: junk.replace(b"\n", b" ").decode("latin-1")),
                 st.sampled_from(["[rank1]: ", "[default2]:", "Killed", "nan", "step=-5 loss=inf"]))
FILE = st.lists(LINE, max_size=40)
NAMES = st.sampled_from(["worker_0.log", "worker_1.log", "worker_3.log", "scheduler.log", "train.log",
                         "worker_1.log.1", "worker_1.log.2.gz", "console.log"])


@FUZZ
@given(files=st.dictionaries(NAMES, FILE, min_size=1, max_size=5), end_newline=st.booleans())
def test_analyze_reads_any_log_directory_without_a_traceback(tmp_path_factory, files, end_newline):
    log_dir = tmp_path_factory.mktemp("fuzz") / "job" / "msrun_log"
    log_dir.mkdir(parents=True)
    for name, lines in files.items():
        data = ("\n".join(lines) + ("\n" if end_newline else "")).encode("utf-8", "surrogateescape")
        (log_dir / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    for output in ("json", "text", "markdown"):
        out, err = io.StringIO(), io.StringIO()
        csv_path = log_dir.parent / "steps.csv"
        status = run_analyze([str(log_dir)], output, csv=str(csv_path) if output == "json" else None,
                             stdout=out, stderr=err)
        if status == 2:  # bad input (nothing readable): one line that names the path
            assert err.getvalue().count("\n") == 1 and str(log_dir) in err.getvalue(), err.getvalue()
            return
        assert status == 0, err.getvalue()
        if output == "json":
            report = json.loads(out.getvalue())
            for run in report["runs"]:
                assert all(finding["kind"] in kinds.KINDS for finding in run["findings"])


@pytest.mark.parametrize("signature", signatures.SIGNATURES, ids=lambda signature: signature.name)
def test_each_kind_of_failure_is_a_finding_on_its_rank(tmp_path, signature):
    log = tmp_path / "job" / "msrun_log" / "worker_5.log"
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(keyvalue_lines(5, range(1, 31), START) + [signature.example]) + "\n")
    out = io.StringIO()
    assert run_analyze([str(log.parent)], "json", stdout=out) == 0
    (run,) = json.loads(out.getvalue())["runs"]
    errors = [(finding["kind"], finding["rank"]) for finding in run["findings"]
              if kinds.KINDS[finding["kind"]].family == kinds.ERROR]
    assert errors, f"{signature.name}: no finding for {signature.example!r}"
    kind, rank = errors[0]
    assert kind in signature.kinds, f"{signature.name}: {kind}, not one of {signature.kinds}"
    named = signatures.match(signature.example.encode())
    # A line naming its own rank ([rank3]:, a c10 message's [Rank 7]) is that rank's; else the file's.
    assert rank == "5" or named is not None and rank != "", f"{signature.name}: on rank {rank!r}"
    text = io.StringIO()
    assert run_analyze([str(log.parent)], "text", stdout=text) == 0
    assert kinds.words(kind) in text.getvalue()
