"""The test's copy of the shipped alert rules, with every window and `for` shortened.

The shipped rule file lists each of its numbers in a THRESHOLDS table (key, value, the
rules that use it). A drill gives a test value for every key; the copy gets each value
replaced, as a whole token, in exactly the rules the table names: `for:` for keys ending
in ``_for``, the expression for all others. A key without a test value, a value not
found where the table says, or a `for:` the table does not cover is an error, so the
copy cannot silently keep a 10-minute window.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

_ROW = re.compile(r"^#\s*\|\s*(?P<key>[a-z_]+)\s*\|\s*(?P<value>\S+)\s*\|\s*(?P<used_in>.+?)\s*\|\s*$")


@dataclass(frozen=True)
class Threshold:
    key: str
    value: str
    used_in: tuple[str, ...]

    @property
    def is_for(self) -> bool:
        return self.key.endswith("_for")


def read_thresholds(text: str) -> list[Threshold]:
    """The rows between ``# BEGIN THRESHOLDS`` and ``# END THRESHOLDS`` (header row skipped)."""
    lines = text.splitlines()
    rows = lines[lines.index("# BEGIN THRESHOLDS") + 1:lines.index("# END THRESHOLDS")]
    matches = [match for match in map(_ROW.match, rows) if match is not None]
    if len(matches) < len(rows):
        raise ValueError(f"malformed THRESHOLDS rows: {[row for row in rows if _ROW.match(row) is None]}")
    return [Threshold(m["key"], m["value"], tuple(m["used_in"].split())) for m in matches if m["key"] != "key"]


def _token(value: str) -> str:
    # The same notion of a whole token as tests/test_rules.py: not inside a name or a number.
    return r"(?<![\w.])" + re.escape(value) + r"(?![\w.])"


def _replace_tokens(expr: str, replacements: Mapping[str, str], rule: str) -> str:
    """All replacements in one pass, so a new value is never replaced again by another row."""
    missing = [old for old in replacements if not re.search(_token(old), expr)]
    if missing:
        raise ValueError(f"{rule}: THRESHOLDS values {missing} not found in its expression")
    pattern = re.compile("|".join(_token(old) for old in sorted(replacements, key=len, reverse=True)))
    return pattern.sub(lambda match: replacements[match.group(0)], expr)


def shorten_rules(text: str, test_values: Mapping[str, str]) -> dict:
    """The rule document of ``text`` with every THRESHOLDS value replaced by its test value."""
    thresholds = read_thresholds(text)
    keys = {threshold.key for threshold in thresholds}
    if keys != set(test_values):
        raise ValueError(f"test values must cover exactly the THRESHOLDS keys: "
                         f"missing {sorted(keys - set(test_values))}, unknown {sorted(set(test_values) - keys)}")
    document = yaml.safe_load(text)
    rules = {rule.get("alert") or rule["record"]: rule for group in document["groups"] for rule in group["rules"]}
    expr_changes: dict[str, dict[str, str]] = {}
    for threshold in thresholds:
        new = test_values[threshold.key]
        for name in threshold.used_in:
            rule = rules[name]
            if threshold.is_for:
                if rule.get("for") != threshold.value:
                    raise ValueError(f"{name}: for is {rule.get('for')!r}, THRESHOLDS says {threshold.value}")
                rule["for"] = new
                continue
            changes = expr_changes.setdefault(name, {})
            if changes.get(threshold.value, new) != new:
                raise ValueError(f"{name}: {threshold.value} has two different test values")
            changes[threshold.value] = new
    for name, changes in expr_changes.items():
        rules[name]["expr"] = _replace_tokens(rules[name]["expr"], changes, name)
    covered = {name for threshold in thresholds if threshold.is_for for name in threshold.used_in}
    uncovered = sorted(name for name, rule in rules.items() if "for" in rule and name not in covered)
    if uncovered:
        raise ValueError(f"rules with a `for:` the THRESHOLDS table does not name: {uncovered}")
    return document


class _ReadableDumper(yaml.SafeDumper):
    """Multi-line expressions as `|` blocks, as in the shipped file, for whoever reads a failed drill's copy."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_ReadableDumper.add_representer(str, _represent_str)


def write_shortened_rules(source: Path, destination: Path, test_values: Mapping[str, str]) -> Path:
    destination.parent.mkdir(parents=True, exist_ok=True)
    document = shorten_rules(source.read_text(encoding="utf-8"), test_values)
    destination.write_text(yaml.dump(document, Dumper=_ReadableDumper, sort_keys=False, width=1000), encoding="utf-8")
    return destination
