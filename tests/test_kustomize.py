"""deploy/kubernetes: rendered by `kubectl kustomize`, every object validated, rules not drifting."""

from __future__ import annotations

import subprocess
import sys

import yaml

from tests.support.exporter_process import REPO
from tests.support.helm import of_kind, sidecar_container
from tests.support.kube import containers_by_name, kustomize, pod_spec, validate

KUBERNETES = REPO / "deploy" / "kubernetes"
EXAMPLE = KUBERNETES / "examples" / "msrun-2node"
SYNC = REPO / "scripts" / "sync_kubernetes_rules.py"
RULES = REPO / "deploy" / "prometheus" / "rules"
ALERTMANAGER = REPO / "deploy" / "alertmanager" / "alertmanager.yml"
PLACEHOLDER_RULES = """\
groups:
  - name: placeholder
    rules:
      # A comment, kept in the generated object.
      - alert: PlaceholderAlert
        expr: training_loss > 100
        annotations:
          summary: "{{ $labels.run }} rank {{ $labels.rank }}"
"""


def sync(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SYNC), *args], capture_output=True, text=True, timeout=60)


def test_base_and_example_render_valid_objects():
    for directory in (KUBERNETES / "base", EXAMPLE):
        objects = kustomize(directory)
        assert objects
        for obj in objects:
            validate(obj)


def test_example_is_a_two_node_msrun_job_with_the_sidecar():
    objects = kustomize(EXAMPLE)
    (job,) = of_kind(objects, "Job")
    (monitor,) = of_kind(objects, "PodMonitor")
    (service,) = of_kind(objects, "Service")
    spec = pod_spec(job)
    exporter, trainer = containers_by_name(spec)["trainlog-exporter"], containers_by_name(spec)["trainer"]
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    assert job["spec"]["completionMode"] == "Indexed"
    assert spec["subdomain"] == service["metadata"]["name"] and service["spec"]["clusterIP"] == "None"
    assert spec["volumes"] == [{"name": "trainlog-logs", "emptyDir": {}}]
    assert trainer["volumeMounts"][0]["mountPath"] == f"{trainer['workingDir']}/output/msrun_log"
    assert "output/msrun_log" in trainer["args"][0]
    assert exporter["volumeMounts"] == [{"name": "trainlog-logs", "mountPath": "/logs", "readOnly": True}]
    assert exporter in spec["initContainers"] and exporter["restartPolicy"] == "Always"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == exporter["ports"][0]["name"]
    assert "trainlog" in monitor["metadata"]["name"]  # TrainingExporterDown's job matcher


def test_example_sidecar_is_the_one_the_helm_chart_injects():
    (job,) = of_kind(kustomize(EXAMPLE), "Job")
    from_kustomize = dict(containers_by_name(pod_spec(job))["trainlog-exporter"])
    from_helm = sidecar_container()
    assert from_kustomize.pop("image") == "trainlog-exporter:0.1.0"
    from_helm.pop("image")
    assert from_kustomize == from_helm


def test_committed_prometheus_rules_match_the_rules_files():
    result = sync("--check")
    assert result.returncode == 0, result.stderr


def test_generated_prometheus_rules_embed_the_files_as_written(tmp_path):
    rules_dir, out = tmp_path / "rules", tmp_path / "out"
    rules_dir.mkdir()
    for path in RULES.glob("*.yml"):
        (rules_dir / path.name).write_text(path.read_text())
    (rules_dir / "placeholder.yml").write_text(PLACEHOLDER_RULES)
    assert sync("--rules-dir", str(rules_dir), "--out", str(out)).returncode == 0
    assert "# A comment, kept in the generated object." in (out / "placeholder.yaml").read_text()
    objects = kustomize(out)
    for obj in objects:
        validate(obj)
    rules = of_kind(objects, "PrometheusRule")
    assert {obj["metadata"]["name"] for obj in rules} == {path.stem for path in rules_dir.glob("*.yml")}
    for obj in rules:
        assert obj["spec"] == yaml.safe_load((rules_dir / f"{obj['metadata']['name']}.yml").read_text())


def test_the_inhibit_rules_become_an_alertmanager_config():
    """Each inhibit rule of deploy/alertmanager/alertmanager.yml, matcher by matcher, in the CRD's spelling."""
    (config,) = of_kind(kustomize(KUBERNETES / "base"), "AlertmanagerConfig")
    validate(config)
    shipped = yaml.safe_load(ALERTMANAGER.read_text())["inhibit_rules"]
    generated = config["spec"]["inhibitRules"]
    assert len(generated) == len(shipped)
    for rule, crd in zip(shipped, generated, strict=True):
        for side, crd_side in (("source_matchers", "sourceMatch"), ("target_matchers", "targetMatch")):
            assert [f'{m["name"]}{m.get("matchType", "=")}"{m["value"]}"' for m in crd[crd_side]] == rule[side]
        assert crd["equal"] == rule["equal"]


def test_drift_is_reported_and_repaired(tmp_path):
    rules_dir, out = tmp_path / "rules", tmp_path / "out"
    rules_dir.mkdir()
    (rules_dir / "placeholder.yml").write_text(PLACEHOLDER_RULES)
    assert sync("--rules-dir", str(rules_dir), "--out", str(out)).returncode == 0
    (rules_dir / "placeholder.yml").write_text(PLACEHOLDER_RULES.replace("> 100", "> 50"))
    (rules_dir / "new.yml").write_text(PLACEHOLDER_RULES)
    stale = sync("--rules-dir", str(rules_dir), "--out", str(out), "--check")
    assert stale.returncode == 1 and "new.yaml" in stale.stderr and "placeholder.yaml" in stale.stderr
    (rules_dir / "new.yml").unlink()
    assert sync("--rules-dir", str(rules_dir), "--out", str(out)).returncode == 0
    assert sorted(path.name for path in out.iterdir()) == ["kustomization.yaml", "placeholder.yaml",
                                                          "trainlog-inhibit-rules.yaml"]
    assert sync("--rules-dir", str(rules_dir), "--out", str(out), "--check").returncode == 0


def test_tls_example_mounts_the_web_config_and_scrapes_over_https_with_credentials():
    objects = kustomize(KUBERNETES / "examples" / "msrun-2node-tls")
    for obj in objects:
        validate(obj)
    (job,) = of_kind(objects, "Job")
    (monitor,) = of_kind(objects, "PodMonitor")
    spec = pod_spec(job)
    exporter = containers_by_name(spec)["trainlog-exporter"]
    assert "--web.config.file=/etc/trainlog-exporter/web/web-config.yml" in exporter["args"]
    assert {"name": "trainlog-web-config", "mountPath": "/etc/trainlog-exporter/web",
            "readOnly": True} in exporter["volumeMounts"]
    assert {"name": "trainlog-web-config", "secret": {"secretName": "trainlog-web"}} in spec["volumes"]
    assert "tcpSocket" in exporter["livenessProbe"] and "tcpSocket" in exporter["readinessProbe"]
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["scheme"] == "https"
    assert endpoint["basicAuth"]["password"] == {"name": "trainlog-scrape-auth", "key": "password"}
