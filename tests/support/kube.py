"""Kubernetes objects as the API server would judge them, offline.

Built-in kinds are checked with kubernetes-validate (the API's OpenAPI schemas, strict: an
unknown field is an error) against the oldest and newest Kubernetes the manifests support.
Prometheus Operator kinds have no schema there: they are checked with cloudcoil's models,
generated from the operator's CRDs (required fields, types), plus a round trip that finds
fields the CRD does not know.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes_validate
import yaml

from tests.support.tools import require_tool

# Native sidecars (initContainers with restartPolicy: Always) need 1.29.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())
OPERATOR_GROUP = "monitoring.coreos.com/"


def load_objects(text: str) -> list[dict]:
    """Every non-empty YAML document of a manifest stream."""
    return [document for document in yaml.safe_load_all(text) if document]


def validate(obj: dict) -> None:
    """Raise AssertionError naming the object and the problem, if the API would reject it."""
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    if obj.get("apiVersion", "").startswith(OPERATOR_GROUP):
        _validate_operator_object(obj, where)
        return
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            raise AssertionError(f"{where} is invalid for Kubernetes {version} at "
                                 f"{'.'.join(map(str, error.path))}: {error.message}") from None


def _validate_operator_object(obj: dict, where: str) -> None:
    from cloudcoil.models import prometheus_operator
    from pydantic import ValidationError

    version = getattr(prometheus_operator, obj["apiVersion"].removeprefix(OPERATOR_GROUP), None)  # v1, v1alpha1
    model = getattr(version, obj["kind"], None)
    assert model is not None, f"{where}: unknown Prometheus Operator kind"
    try:
        parsed = model.model_validate(obj)
    except ValidationError as error:
        raise AssertionError(f"{where} does not match the {obj['kind']} CRD: {error}") from None
    known = parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)
    unknown = _unknown_fields(obj, known)
    assert not unknown, f"{where} has fields the {obj['kind']} CRD does not define: {unknown}"


def _unknown_fields(given, known, path: str = "") -> list[str]:
    """Paths present in ``given`` but dropped by the model (free-form maps are kept whole)."""
    if isinstance(given, dict) and isinstance(known, dict):
        return [found for key, value in given.items()
                for found in ([f"{path}.{key}"] if key not in known
                              else _unknown_fields(value, known[key], f"{path}.{key}"))]
    if isinstance(given, list) and isinstance(known, list):
        return [found for index, (a, b) in enumerate(zip(given, known, strict=False))
                for found in _unknown_fields(a, b, f"{path}[{index}]")]
    return []


def kubectl() -> str:
    return require_tool("kubectl", "the machine image's kubectl package; it bundles kustomize")


def kustomize(directory: Path) -> list[dict]:
    """`kubectl kustomize DIR` (offline), as objects."""
    result = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return load_objects(result.stdout)


def pod_spec(workload: dict) -> dict:
    """The pod spec of a Deployment, DaemonSet or Job."""
    return workload["spec"]["template"]["spec"]


def containers_by_name(spec: dict) -> dict[str, dict]:
    return {container["name"]: container for key in ("initContainers", "containers") for container in spec.get(key, [])}
