"""The parser's regular expressions are compiled at their first use (exporter/parse/patterns.py)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from exporter.parse.patterns import LazyPattern, lazy


def test_every_lazy_pattern_of_the_parser_compiles_and_answers_as_its_compiled_pattern():
    # In a new interpreter, where no pattern has been used yet.
    script = textwrap.dedent("""
        import importlib, pkgutil, re
        import exporter.parse
        from exporter.parse.patterns import LazyPattern
        found = {}  # a pattern imported into other modules, once
        for module in pkgutil.walk_packages(exporter.parse.__path__, "exporter.parse."):
            for attribute, value in vars(importlib.import_module(module.name)).items():
                if isinstance(value, LazyPattern):
                    found.setdefault(id(value), (f"{module.name}.{attribute}", value))
        assert len(found) > 60, len(found)  # the signatures' and the formats' at least
        for name, pattern in found.values():
            compiled = re.compile(pattern._source, pattern._flags)  # raises for a pattern that cannot compile
            assert pattern.pattern == compiled.pattern and pattern.groups == compiled.groups, name
            # In the module that made it, the name is the compiled pattern itself from now on.
            assert compiled in pattern._namespace.values() and pattern not in pattern._namespace.values(), name
        print(len(found))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and int(result.stdout) > 60, result.stderr


def test_a_lazy_pattern_compiles_once_at_its_first_use_and_then_behaves_as_re_pattern():
    pattern = lazy(r"step (\d+)", re.IGNORECASE)
    assert isinstance(pattern, LazyPattern)
    match = pattern.search("STEP 12 done")
    assert not isinstance(pattern, LazyPattern) and match is not None and match.group(1) == "12"
    assert pattern.sub("#", "step 1, Step 2") == "#, #"
    assert [m.group(1) for m in pattern.finditer("step 3 step 4")] == ["3", "4"]
    assert pattern.flags & re.IGNORECASE


def test_a_bad_pattern_fails_at_its_first_use_with_re_error():
    pattern = lazy(r"(unclosed")
    with pytest.raises(re.error):
        pattern.search("text")


def test_importing_the_parser_and_reading_healthy_step_lines_compiles_no_failure_pattern():
    # In a new interpreter: nothing of this process's imports or tests has used them yet.
    script = textwrap.dedent("""
        import re
        from exporter.parse import LineParser, signatures
        compiled = lambda: sorted(name for name, value in vars(signatures).items() if isinstance(value, re.Pattern))
        assert compiled() == [], compiled()
        parser = LineParser()
        line = (b"2025-01-01 12:00:00,000 - mindformers[mindformers/core/callback/callback.py:529] - INFO - "
                b"{ Epoch:[  1/  2], step:[    1/  100], loss: 2.000000, per_step_time: 100ms, lr: 1e-05, "
                b"overflow cond: False, loss_scale: 1.0, global_norm: [1.5], train_throughput_per_npu: 1.0T }\\n")
        parsed = parser.parse_block(line * 50)
        assert parsed.records, "the step lines gave no record"
        assert compiled() == [], compiled()
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
