"""The Helm chart rendered by Helm's own engine (helm-python-sdk: Helm's Go SDK, no binary)."""

from __future__ import annotations

import itertools
import re
import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from tests.support.exporter_process import REPO
from tests.support.kube import load_objects

CHART = REPO / "helm" / "trainlog-exporter"
CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
RULES = REPO / "deploy" / "prometheus" / "rules"
DASHBOARDS = REPO / "grafana" / "dashboards"

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed (the test extra installs it)")


def values_file(path: Path | None) -> dict:
    return yaml.safe_load(path.read_text()) if path else {}


def render(chart: Path = CHART, values: dict | None = None, name: str = "demo",
           namespace: str = "ml") -> dict[str, str]:
    """Template path -> rendered text, as `helm template` (schema checked first, as Helm does)."""
    with helm.Chart.load(chart) as loaded:
        return loaded.render(values=values or {}, name=name, namespace=namespace, is_install=True)


def rendered_objects(rendered: dict[str, str]) -> list[dict]:
    return [obj for path, text in sorted(rendered.items()) if not path.endswith("NOTES.txt")
            for obj in load_objects(text)]


def notes(rendered: dict[str, str]) -> str:
    return next(text for path, text in rendered.items() if path == "trainlog-exporter/templates/NOTES.txt")


def repository_copy(destination: Path, extra_rules: Mapping[str, str] | None = None,
                    extra_dashboards: Mapping[str, str] | None = None) -> Path:
    """The chart, the rules and the dashboards laid out as in the repository (links kept),
    plus extra files; returns the chart's directory."""
    shutil.copytree(REPO / "helm", destination / "helm", symlinks=True)
    for source, relative, extra in ((RULES, "deploy/prometheus/rules", extra_rules or {}),
                                    (DASHBOARDS, "grafana/dashboards", extra_dashboards or {})):
        shutil.copytree(source, destination / relative)
        for name, text in extra.items():
            (destination / relative / name).write_text(text)
    return destination / "helm" / "trainlog-exporter"


def of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [obj for obj in objects if obj["kind"] == kind]


def example_training_chart(destination: Path) -> Path:
    """helm/examples/msrun-training with its dependency in charts/, as `helm dependency update` leaves it."""
    chart = destination / "msrun-training"
    shutil.copytree(REPO / "helm" / "examples" / "msrun-training", chart)
    shutil.copytree(CHART, chart / "charts" / "trainlog-exporter")  # links followed: a packaged dependency
    return chart


def sidecar_container(values: dict | None = None) -> dict:
    """The exporter container that sidecar mode injects, rendered from the NOTES snippet's source."""
    rendered = render(values={**(values or {}), "mode": "sidecar"})
    pod = yaml.safe_load(notes(rendered).split("add to the pod template:\n", 1)[1])
    return pod["spec"]["initContainers"][0]


def documented_installs(markdown: Path) -> list[dict]:
    """The values of every `helm install ... --set ...` command in a document's sh blocks."""
    installs = []
    for block in re.findall(r"```sh\n(.*?)```", markdown.read_text(), re.S):
        for command in block.replace("\\\n", " ").splitlines():
            words = shlex.split(command, comments=True)
            if words[:2] != ["helm", "install"]:
                continue
            values: dict = {}
            for flag, setting in itertools.pairwise(words):
                if flag == "--set":
                    merge(values, helm.parse_set_string(setting))
            installs.append(values)
    return installs


def merge(into: dict, values: dict) -> dict:
    """Deep merge, later values winning, as repeated --set flags do."""
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value
    return into
