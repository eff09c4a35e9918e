"""The Helm chart: rendered by Helm's engine for every values file, every object validated."""

from __future__ import annotations

import json
import tarfile

import pytest
import yaml

from tests.support.exporter_process import REPO
from tests.support.helm import (
    CHART,
    CI_VALUES,
    DASHBOARDS,
    RULES,
    documented_installs,
    example_training_chart,
    helm,
    notes,
    of_kind,
    render,
    rendered_objects,
    repository_copy,
    sidecar_container,
    values_file,
)
from tests.support.kube import containers_by_name, pod_spec, validate

WORKLOADS = ("Deployment", "DaemonSet")
PLACEHOLDER_RULES = """\
# A placeholder rules file: the chart must carry it as it is, Prometheus templates included.
groups:
  - name: placeholder
    rules:
      - alert: PlaceholderAlert
        expr: |
          training_loss{rank!=""}
            > 100
        for: 1m
        labels:
          severity: warning
        annotations:
          summary: "Loss of {{ $labels.run }} rank {{ $labels.rank }} is {{ $value }}"
"""
PLACEHOLDER_DASHBOARD = json.dumps({
    "title": "Placeholder", "uid": "placeholder", "panels": [],
    "templating": {"list": [{"name": "datasource", "query": "{{ not a helm template }}"}]},
})
ALL_ON = {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True},
          "prometheusRule": {"enabled": True}, "dashboards": {"enabled": True}}


@pytest.fixture(params=[None, *CI_VALUES], ids=lambda path: path.name if path else "default-values")
def values(request) -> dict:
    return values_file(request.param)


def exporter_containers(objects: list[dict]) -> list[dict]:
    return [containers_by_name(pod_spec(obj))["trainlog-exporter"] for obj in objects if obj["kind"] in WORKLOADS]


def test_every_rendered_object_is_valid(values):
    objects = rendered_objects(render(values=values))
    assert objects
    for obj in objects:
        validate(obj)


@pytest.mark.parametrize("document", [REPO / "docs" / "kubernetes.md", CHART / "README.md"], ids=lambda path: path.name)
def test_documented_helm_commands_render_valid_objects(document):
    installs = documented_installs(document)
    assert len(installs) >= 2
    for values in installs:
        for obj in rendered_objects(render(values=values)):
            validate(obj)


def test_chart_lints_clean_in_strict_mode(values):
    report = helm.lint(CHART, values, strict=True)
    problems = [message for message in report["messages"] if message["severity"] >= 2]  # 2 warning, 3 error
    assert not problems and not report["errors"], report


def test_exporter_is_locked_down(values):
    containers = exporter_containers(rendered_objects(render(values=values)))
    if values.get("mode") == "sidecar":
        assert not containers, "sidecar mode renders no workload"
        containers = [sidecar_container(values)]
    (container,) = containers
    security = container["securityContext"]
    assert security["runAsNonRoot"] is True and security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False and security["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"] and container["resources"]["limits"]
    log_mount = next(mount for mount in container["volumeMounts"] if mount["name"] == "trainlog-logs")
    assert log_mount["readOnly"] is True


def test_standalone_reads_the_configured_volume_and_directories():
    values = values_file(CHART / "ci" / "pvc-values.yaml")
    (deployment,) = of_kind(rendered_objects(render(values=values)), "Deployment")
    spec = pod_spec(deployment)
    (volume,) = [volume for volume in spec["volumes"] if volume["name"] == "trainlog-logs"]
    assert volume == {"name": "trainlog-logs", "persistentVolumeClaim": {"claimName": "shared-training-logs",
                                                                         "readOnly": True}}
    args = containers_by_name(spec)["trainlog-exporter"]["args"]
    assert args[:2] == ["--log-dir=/shared/llama-70b/node-0/output/msrun_log",
                        "--log-dir=/shared/llama-70b/node-1/output/msrun_log"]
    assert "--run=llama-70b-pretrain" in args


def test_default_standalone_volume_is_a_host_path():
    (deployment,) = of_kind(rendered_objects(render()), "Deployment")
    (volume,) = pod_spec(deployment)["volumes"]
    assert volume["hostPath"]["path"] == "/var/log/training"


def test_service_monitor_scrapes_the_service_port():
    monitor_values = {"enabled": True, "additionalLabels": {"release": "kps"}}
    objects = rendered_objects(render(values={"serviceMonitor": monitor_values}))
    (service,) = of_kind(objects, "Service")
    (monitor,) = of_kind(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    # The shipped TrainingExporterDown alert finds the exporter by a job containing "trainlog".
    assert "trainlog" in service["metadata"]["name"]


def test_schema_rejects_a_typo_and_a_bad_mode():
    with helm.Chart.load(CHART) as chart:
        for bad in ({"mdoe": "sidecar"}, {"mode": "sidekick"}, {"standalone": {"kind": "StatefulSet"}},
                    {"standalone": {"logVolume": {"hostPath": {"path": "/a"}, "emptyDir": {}}}}):
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema(bad)


def test_prometheus_rules_and_dashboards_are_the_repository_files(tmp_path):
    chart = repository_copy(tmp_path, {"placeholder.yml": PLACEHOLDER_RULES},
                            {"placeholder.json": PLACEHOLDER_DASHBOARD})
    rules_dir = tmp_path / "deploy/prometheus/rules"
    dashboards_dir = tmp_path / "grafana/dashboards"
    objects = rendered_objects(render(chart, values=ALL_ON))
    for obj in objects:
        validate(obj)
    rules = {obj["metadata"]["name"]: obj for obj in of_kind(objects, "PrometheusRule")}
    assert set(rules) == {f"demo-trainlog-exporter-{path.stem}" for path in rules_dir.glob("*.yml")}
    for path in rules_dir.glob("*.yml"):
        assert rules[f"demo-trainlog-exporter-{path.stem}"]["spec"] == yaml.safe_load(path.read_text())
    dashboards = {obj["metadata"]["name"]: obj for obj in of_kind(objects, "ConfigMap")}
    assert set(dashboards) == {f"demo-trainlog-exporter-dashboard-{path.stem}"
                               for path in dashboards_dir.glob("*.json")}
    placeholder = dashboards["demo-trainlog-exporter-dashboard-placeholder"]
    assert placeholder["data"] == {"placeholder.json": PLACEHOLDER_DASHBOARD}
    assert placeholder["metadata"]["labels"]["grafana_dashboard"] == "1"


def test_the_repository_chart_carries_exactly_the_repository_rules_and_dashboards():
    objects = rendered_objects(render(values=ALL_ON))
    assert len(of_kind(objects, "PrometheusRule")) == len(list(RULES.glob("*.yml")))
    assert len(of_kind(objects, "ConfigMap")) == len(list(DASHBOARDS.glob("*.json")))


def test_dashboards_fit_in_a_config_map():
    for path in DASHBOARDS.glob("*.json"):
        assert path.stat().st_size < 1024 * 1024 - 4096, f"{path.name} is too large for one ConfigMap"


def test_packaged_chart_contains_the_linked_files(tmp_path):
    chart = repository_copy(tmp_path / "repo", {"placeholder.yml": PLACEHOLDER_RULES},
                            {"placeholder.json": PLACEHOLDER_DASHBOARD})
    archive = helm.package(chart, destination=tmp_path)
    with tarfile.open(archive) as packaged:
        names = packaged.getnames()
        rules = packaged.extractfile("trainlog-exporter/files/rules/placeholder.yml").read().decode()
    assert rules == PLACEHOLDER_RULES
    assert "trainlog-exporter/files/dashboards/placeholder.json" in names
    assert not [name for name in names if name.endswith(".gitkeep")]
    with helm.Chart.load(archive) as packaged_chart:
        objects = rendered_objects(packaged_chart.render(values=ALL_ON, name="demo", namespace="ml"))
    rule_names = {obj["metadata"]["name"] for obj in of_kind(objects, "PrometheusRule")}
    assert "demo-trainlog-exporter-placeholder" in rule_names


def test_standalone_notes_say_how_to_reach_it():
    assert "port-forward svc/demo-trainlog-exporter 10042" in notes(render())


def test_sidecar_templates_inject_the_exporter_into_a_training_job(tmp_path):
    objects = rendered_objects(render(example_training_chart(tmp_path), name="llama"))
    for obj in objects:
        validate(obj)
    (job,) = of_kind(objects, "Job")
    (monitor,) = of_kind(objects, "PodMonitor")
    spec = pod_spec(job)
    exporter = spec["initContainers"][0]
    trainer = containers_by_name(spec)["trainer"]
    assert exporter["name"] == "trainlog-exporter" and exporter["restartPolicy"] == "Always"  # native sidecar
    assert monitor["spec"]["selector"]["matchLabels"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == exporter["ports"][0]["name"]
    # One emptyDir: written by the trainer at msrun's --log_dir, read-only for the exporter.
    assert spec["volumes"] == [{"name": "trainlog-logs", "emptyDir": {}}]
    assert trainer["volumeMounts"] == [
        {"name": "trainlog-logs", "mountPath": "/workspace/mindformers/output/msrun_log"}]
    assert exporter["volumeMounts"] == [{"name": "trainlog-logs", "mountPath": "/logs", "readOnly": True}]
    assert "--log-dir=/logs" in exporter["args"]
    downward = {env["name"]: env["valueFrom"]["fieldRef"]["fieldPath"] for env in exporter["env"]}
    assert downward == {"NODE_NAME": "spec.nodeName", "POD_NAME": "metadata.name",
                        "POD_NAMESPACE": "metadata.namespace",
                        "TRAINLOG_RUN": "metadata.labels['batch.kubernetes.io/job-name']"}


def test_sidecar_for_older_clusters_is_a_regular_container(tmp_path):
    chart = example_training_chart(tmp_path)
    objects = rendered_objects(render(chart, values={"trainlog-exporter": {"sidecar": {"native": False}}}))
    spec = pod_spec(of_kind(objects, "Job")[0])
    assert "initContainers" not in spec
    assert [container["name"] for container in spec["containers"]] == ["trainlog-exporter", "trainer"]
    assert "restartPolicy" not in spec["containers"][0]
    validate(of_kind(objects, "Job")[0])


def test_sidecar_snippet_in_the_notes_is_the_injected_container(tmp_path):
    (job,) = of_kind(rendered_objects(render(example_training_chart(tmp_path), name="llama")), "Job")
    assert pod_spec(job)["initContainers"][0] == sidecar_container()


def test_sidecar_mode_with_a_service_monitor_fails_clearly_instead_of_rendering_nothing():
    with pytest.raises(Exception, match="serviceMonitor.enabled needs mode: standalone") as error:
        render(values={"mode": "sidecar", "serviceMonitor": {"enabled": True}})
    assert "podMonitor.enabled=true" in str(error.value)


def test_web_config_mounts_the_secret_and_switches_probes_and_monitors_to_https():
    scrape = {"basicAuth": {"username": {"name": "prom-auth", "key": "user"},
                            "password": {"name": "prom-auth", "key": "password"}}}
    objects = rendered_objects(render(values={
        "webConfig": {"secretName": "trainlog-web", "tls": True, "scrape": scrape},
        "serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}))
    for obj in objects:
        validate(obj)
    (container,) = exporter_containers(objects)
    assert "--web.config.file=/etc/trainlog-exporter/web/web-config.yml" in container["args"]
    mount = next(mount for mount in container["volumeMounts"] if mount["name"] == "trainlog-web-config")
    assert mount == {"name": "trainlog-web-config", "mountPath": "/etc/trainlog-exporter/web", "readOnly": True}
    (workload,) = [obj for obj in objects if obj["kind"] in WORKLOADS]
    volume = next(volume for volume in pod_spec(workload)["volumes"] if volume["name"] == "trainlog-web-config")
    assert volume["secret"] == {"secretName": "trainlog-web"}
    assert container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    (service_monitor,) = of_kind(objects, "ServiceMonitor")
    (pod_monitor,) = of_kind(objects, "PodMonitor")
    for endpoint in (service_monitor["spec"]["endpoints"][0], pod_monitor["spec"]["podMetricsEndpoints"][0]):
        assert endpoint["scheme"] == "https"
        assert endpoint["basicAuth"] == scrape["basicAuth"]
        assert endpoint["interval"] == "30s"


def test_without_web_config_nothing_changes_for_the_probes():
    (container,) = exporter_containers(rendered_objects(render()))
    assert "scheme" not in container["livenessProbe"]["httpGet"]
    assert not any(arg.startswith("--web.config.file") for arg in container["args"])


HOST_LOGS = {"processLogs": {"enabled": True}, "kernelLog": {"enabled": True, "file": "messages"}}


def test_the_nodes_own_logs_are_off_by_default(tmp_path):
    standalone = rendered_objects(render())
    (job,) = of_kind(rendered_objects(render(example_training_chart(tmp_path))), "Job")
    for spec in [pod_spec(obj) for obj in standalone if obj["kind"] in WORKLOADS] + [pod_spec(job)]:
        assert [volume["name"] for volume in spec["volumes"]] == ["trainlog-logs"]
    for container in [*exporter_containers(standalone), pod_spec(job)["initContainers"][0]]:
        assert [arg for arg in container["args"] if arg.startswith(("--log-dir", "--log-file", "--plog"))] == [
            "--log-dir=/logs"]


def test_host_logs_mount_cann_process_logs_and_the_kernel_log_read_only_and_follow_them():
    objects = rendered_objects(render(values={"run": "llama-70b", "standalone": {"kind": "DaemonSet"},
                                              "hostLogs": HOST_LOGS}))
    for obj in objects:
        validate(obj)
    (container,) = exporter_containers(objects)
    (workload,) = [obj for obj in objects if obj["kind"] in WORKLOADS]
    volumes = {volume["name"]: volume for volume in pod_spec(workload)["volumes"]}
    assert volumes["trainlog-process-logs"]["hostPath"] == {"path": "/root/ascend/log", "type": "DirectoryOrCreate"}
    assert volumes["trainlog-kernel-log"]["hostPath"] == {"path": "/var/log", "type": "Directory"}
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    assert mounts["trainlog-process-logs"] == {"name": "trainlog-process-logs", "mountPath": "/host/ascend/log",
                                               "readOnly": True}
    assert mounts["trainlog-kernel-log"] == {"name": "trainlog-kernel-log", "mountPath": "/host/var/log",
                                             "readOnly": True}
    assert container["args"][:3] == ["--log-dir=/logs", "--web.listen-address=:10042", "--run=llama-70b"]
    assert container["args"][3:] == ["--log-dir=/host/ascend/log", "--plog-ranks", "--log-file=/host/var/log/messages"]
    # The exporter takes them as they are.
    from exporter.cli import build_parser
    from exporter.settings import load_settings

    arguments = vars(build_parser().parse_args(["serve", *container["args"]]))
    arguments.pop("command")
    settings = load_settings(**arguments)
    assert ([str(path) for path in settings.log_dir], settings.log_file, settings.plog_ranks) == (
        ["/logs", "/host/ascend/log"], ["/host/var/log/messages"], True)


def test_host_logs_in_a_sidecar_take_the_run_from_the_pod_label(tmp_path):
    objects = rendered_objects(render(example_training_chart(tmp_path), name="llama",
                                      values={"trainlog-exporter": {"hostLogs": {"processLogs": {
                                          "enabled": True, "pidRanks": False}}}}))
    (job,) = of_kind(objects, "Job")
    validate(job)
    exporter = pod_spec(job)["initContainers"][0]
    assert "--log-dir=/host/ascend/log" in exporter["args"] and "--plog-ranks" not in exporter["args"]
    assert {volume["name"] for volume in pod_spec(job)["volumes"]} == {"trainlog-logs", "trainlog-process-logs"}


def test_host_logs_without_one_run_label_fail_clearly():
    with pytest.raises(Exception, match="hostLogs: set run"):
        render(values={"hostLogs": HOST_LOGS})
    with pytest.raises(Exception, match="hostLogs: set run"):
        render(values={"mode": "sidecar", "sidecar": {"runFromPodLabel": ""}, "hostLogs": HOST_LOGS})
