"""deploy/docker-compose.yml, checked without a Docker engine: mounts, commands, Prometheus config."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.cli import build_parser
from exporter.settings import DEFAULT_PORT, load_settings
from tests.support.exporter_process import REPO
from tests.support.prometheus import require_binary

DEPLOY = REPO / "deploy"
COMPOSE = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def bind_mounts(service: str) -> dict[str, Path]:
    """Container path -> host path (resolved from deploy/) of a service's bind mounts."""
    mounts = {}
    for volume in SERVICES[service].get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = (DEPLOY / source).resolve()
    return mounts


def test_every_service_names_an_image_and_the_exporter_image_is_built_here():
    assert all("image" in service for service in SERVICES.values())
    for name in ("simulate", "exporter"):
        assert SERVICES[name]["build"]["context"] == ".." and SERVICES[name]["read_only"] is True
    assert (DEPLOY / SERVICES["exporter"]["build"]["context"] / "Dockerfile").is_file()


def test_exporter_command_is_accepted_by_the_cli_and_reads_the_shared_volume():
    command = SERVICES["exporter"]["command"]
    arguments = vars(build_parser().parse_args(["serve", *command]))
    arguments.pop("command")
    settings = load_settings(**arguments)
    assert [str(path) for path in settings.log_dir] == ["/logs"]
    assert "logs:/logs:ro" in SERVICES["exporter"]["volumes"] and "logs:/logs" in SERVICES["simulate"]["volumes"]
    assert f"{DEFAULT_PORT}:{DEFAULT_PORT}" in SERVICES["exporter"]["ports"]


def test_simulate_command_is_accepted_by_the_cli():
    pytest.importorskip("exporter.simulate", reason="the simulate subcommand is not in this checkout yet")
    arguments = vars(build_parser().parse_args(SERVICES["simulate"]["command"]))
    assert arguments["command"] == "simulate"
    assert str(arguments["out"]).startswith("/logs/")


def test_prometheus_mounts_the_repository_rules():
    assert bind_mounts("prometheus")["/etc/prometheus/rules"] == DEPLOY / "prometheus" / "rules"


def test_prometheus_config_passes_promtool_with_the_repository_rules(tmp_path):
    promtool = require_binary("promtool")
    mounts = bind_mounts("prometheus")
    config = yaml.safe_load(mounts["/etc/prometheus/prometheus.yml"].read_text())
    assert config["scrape_configs"][0]["static_configs"][0]["targets"] == [f"exporter:{DEFAULT_PORT}"]
    assert "trainlog" in config["scrape_configs"][0]["job_name"]  # TrainingExporterDown's job matcher
    # The container's paths, mapped back to the repository's files.
    rules = mounts["/etc/prometheus/rules"]
    config["rule_files"] = [str(rules / Path(pattern).name) for pattern in config["rule_files"]]
    checked = tmp_path / "prometheus.yml"
    checked.write_text(yaml.safe_dump(config))
    result = subprocess.run([promtool, "check", "config", str(checked)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_grafana_is_provisioned_from_the_repository():
    mounts = bind_mounts("grafana")
    assert mounts["/var/lib/grafana/dashboards"] == REPO / "grafana" / "dashboards"
    provisioning = mounts["/etc/grafana/provisioning"]
    providers = yaml.safe_load(next((provisioning / "dashboards").glob("*.yaml")).read_text())["providers"]
    assert {provider["options"]["path"] for provider in providers} == {"/var/lib/grafana/dashboards"}
    datasources = yaml.safe_load(next((provisioning / "datasources").glob("*.yaml")).read_text())["datasources"]
    assert any(source["url"] == "http://prometheus:9090" for source in datasources)
