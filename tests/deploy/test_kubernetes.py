"""deploy/kubernetes: kustomize builds it, the Kubernetes schemas accept it, the code agrees.

kubernetes-validate has no schema for the Prometheus Operator's ServiceMonitor and
PrometheusRule: their structure is checked here, and the PrometheusRule's rules are the ones
promtool checks and tests (deploy/prometheus/alerts.yml), byte for byte.
"""

from __future__ import annotations

import posixpath
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.deployfiles import (
    DOCKERFILE,
    KUBERNETES,
    PROMETHEUS,
    run_tool,
    setting_variables,
    tool,
    yaml_document,
    yaml_documents,
)

from recordsync.cli import build_parser
from recordsync.core.settings import DEFAULT_HTTP_PORT, PREFIX, Settings, load_settings
from recordsync.service.ports.health import HealthServer
from recordsync.service.readiness import Readiness

KUSTOMIZATION = KUBERNETES / "kustomization.yaml"
BACKFILL_JOB = KUBERNETES / "backfill-job.yaml"
INGRESS_EXAMPLE = KUBERNETES / "ingress-example.yaml"
PROMETHEUS_RULE = KUBERNETES / "prometheusrule.yaml"
ALERTS = PROMETHEUS / "alerts.yml"
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
# recordsync exits 0 within 10 s of SIGTERM; Kubernetes must not SIGKILL it before then.
GRACEFUL_SHUTDOWN_S = 10


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `kubectl apply -k deploy/kubernetes` would send, rendered offline by kustomize."""
    result = run_tool(tool("kubectl"), "kustomize", KUBERNETES)
    assert result.returncode == 0, result.stderr
    path = tmp_path_factory.mktemp("kustomize") / "rendered.yaml"
    path.write_text(result.stdout, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    """The kustomization's resources by kind, read from their files (no kubectl needed)."""
    listed = yaml_document(KUSTOMIZATION)["resources"]
    documents = [doc for name in listed for doc in yaml_documents(KUBERNETES / name)]
    by_kind = {document["kind"]: document for document in documents}
    assert len(by_kind) == len(documents), "one resource of each kind"
    return by_kind


def _containers(resource: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from resource["spec"]["template"]["spec"]["containers"]


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container.get("env", [])}


def _workloads(resources: dict[str, Any]) -> list[dict[str, Any]]:
    return [resources["Deployment"], yaml_document(BACKFILL_JOB)]


def test_rendered_manifests_pass_kubernetes_validate_strict(rendered):
    result = run_tool(
        tool("kubernetes-validate"), "--strict", rendered, BACKFILL_JOB, INGRESS_EXAMPLE
    )
    assert result.returncode == 0, result.stdout + result.stderr
    unchecked = {
        line.split(" for kind ")[1].split()[0]
        for line in result.stdout.splitlines()
        if "Couldn't find schema" in line
    }
    assert unchecked == CRD_KINDS  # checked by the structure tests below instead


def test_kustomization_applies_every_manifest_but_the_on_demand_job(resources):
    listed = set(yaml_document(KUSTOMIZATION)["resources"])
    on_disk = {path.name for path in KUBERNETES.glob("*.yaml")}
    assert listed == on_disk - {KUSTOMIZATION.name, BACKFILL_JOB.name, INGRESS_EXAMPLE.name}
    assert set(resources) == {
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
        "Service",
        "ServiceMonitor",
        "PrometheusRule",
    }


def test_kustomize_renders_the_resources_with_the_configured_image(rendered, resources):
    documents = {document["kind"]: document for document in yaml_documents(rendered)}
    assert set(documents) == set(resources)
    (container,) = _containers(documents["Deployment"])
    image = yaml_document(KUSTOMIZATION)["images"][0]
    assert container["image"] == f"{image['newName']}:{image['newTag']}"
    for document in documents.values():
        assert document["metadata"]["labels"]["app.kubernetes.io/name"] == "recordsync"


def test_deployment_runs_several_replicas_rolled_without_ever_running_fewer(resources):
    """The lease decides who syncs what, so pods may overlap: a rollout starts the new pod
    first (maxSurge 1) and stops an old one only once it is ready (maxUnavailable 0)."""
    spec = resources["Deployment"]["spec"]
    assert spec["replicas"] >= 2
    assert spec["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert spec["minReadySeconds"] > 0
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    (container,) = _containers(resources["Deployment"])
    assert build_parser().parse_args(container["args"]).command == "run"


def test_disruption_budget_keeps_one_daemon_pod_and_lets_a_drain_evict_another(resources):
    budget = resources["PodDisruptionBudget"]
    assert budget["apiVersion"] == "policy/v1"
    spec = budget["spec"]
    deployment = resources["Deployment"]["spec"]
    assert spec["minAvailable"] == 1
    assert spec["minAvailable"] < deployment["replicas"]  # else no node could ever be drained
    assert spec["selector"]["matchLabels"] == deployment["selector"]["matchLabels"]


def test_daemon_pods_prefer_different_nodes_without_requiring_them(resources):
    pod = resources["Deployment"]["spec"]["template"]
    (spread,) = pod["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"  # a one-node cluster runs them all
    assert spread["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_daemon_grace_period_covers_a_request_in_flight_and_the_hand_over(resources):
    """SIGTERM waits for a platform request in flight (up to the HTTP timeout), commits its
    page and hands the merchants over; only then may Kubernetes send SIGKILL."""
    pod = resources["Deployment"]["spec"]["template"]["spec"]
    configured = resources["ConfigMap"]["data"].get(f"{PREFIX}HTTP_TIMEOUT")
    http_timeout = Settings().http_timeout if configured is None else float(configured)
    assert pod["terminationGracePeriodSeconds"] >= http_timeout + 2 * GRACEFUL_SHUTDOWN_S


def test_backfill_job_runs_a_range_backfill_beside_the_daemon():
    (container,) = _containers(yaml_document(BACKFILL_JOB))
    args = build_parser().parse_args(container["args"])
    assert args.command == "backfill"
    assert args.start < args.end
    assert _env(container)[f"{PREFIX}HTTP_PORT"]["value"] == "0"


def test_probes_and_scrape_paths_are_served_by_the_health_server(resources):
    (container,) = _containers(resources["Deployment"])
    probe_paths = {
        container[probe]["httpGet"]["path"]
        for probe in ("livenessProbe", "readinessProbe", "startupProbe")
    }
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    scrape_paths = {
        endpoint["path"] for endpoint in resources["ServiceMonitor"]["spec"]["endpoints"]
    }
    readiness = Readiness(ready=True, reason="test")
    with HealthServer(
        0, host="127.0.0.1", registry=CollectorRegistry(), readiness=lambda: readiness
    ) as server:
        for path in probe_paths | scrape_paths:
            url = f"http://127.0.0.1:{server.port}{path}"
            with urllib.request.urlopen(url, timeout=5) as response:
                assert response.status == 200, path
        with pytest.raises(urllib.error.HTTPError) as unknown:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/nothing", timeout=5)
        unknown.value.close()
        assert unknown.value.code == 404


def test_ports_agree_from_settings_to_servicemonitor(resources):
    (container,) = _containers(resources["Deployment"])
    port, _events = container["ports"]
    assert port["containerPort"] == DEFAULT_HTTP_PORT
    assert _env(container)[f"{PREFIX}HTTP_PORT"]["value"] == str(DEFAULT_HTTP_PORT)
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] == port["name"]
    service = resources["Service"]
    service_port, _events_port = service["spec"]["ports"]
    assert service_port["targetPort"] == port["name"]
    assert service_port["port"] == DEFAULT_HTTP_PORT
    template_labels = resources["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= template_labels.items()
    assert f"EXPOSE {DEFAULT_HTTP_PORT}" in DOCKERFILE.read_text(encoding="utf-8")


def test_servicemonitor_selects_the_service_port(resources):
    monitor = resources["ServiceMonitor"]
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    service = resources["Service"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"


def test_down_alert_looks_for_the_job_the_servicemonitor_creates(resources):
    # The Prometheus Operator names a ServiceMonitor's job after the Service.
    job = resources["Service"]["metadata"]["name"]
    rules = yaml_document(ALERTS)["groups"][0]["rules"]
    (down,) = [rule for rule in rules if rule["alert"] == "RecordsyncDown"]
    assert f'up{{job="{job}"}}' in down["expr"]


def test_prometheusrule_holds_exactly_the_rules_promtool_tests(resources):
    rule = resources["PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"] == yaml_document(ALERTS)
    # Text too: the file is generated (deploy/prometheus/render-prometheusrule).
    text = PROMETHEUS_RULE.read_text(encoding="utf-8")
    _, sep, body = text.partition("\nspec:\n")
    assert sep, "prometheusrule.yaml has no top-level spec:"
    indented = "".join(
        "  " + line if line.strip() else line
        for line in ALERTS.read_text(encoding="utf-8").splitlines(keepends=True)
    )
    assert body == indented, "run deploy/prometheus/render-prometheusrule"


def test_prometheusrule_rules_pass_promtool(resources, tmp_path):
    import yaml  # noqa: PLC0415 - present: `resources` parsed YAML

    extracted = tmp_path / "prometheusrule-rules.yml"
    extracted.write_text(yaml.safe_dump(resources["PrometheusRule"]["spec"]), encoding="utf-8")
    result = run_tool(tool("promtool"), "check", "rules", extracted)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("which", ["daemon", "backfill"])
def test_workload_runs_non_root_read_only_with_tmp_writable(resources, which):
    workload = dict(zip(["daemon", "backfill"], _workloads(resources), strict=True))[which]
    pod = workload["spec"]["template"]["spec"]
    uid = pod["securityContext"]["runAsUser"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert uid != 0
    assert f"USER {uid}:" in DOCKERFILE.read_text(encoding="utf-8")
    assert pod["terminationGracePeriodSeconds"] >= 2 * GRACEFUL_SHUTDOWN_S
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]  # noqa: S108 - the pod's own /tmp
    resources_ = container["resources"]
    assert {"cpu", "memory"} <= resources_["requests"].keys() & resources_["limits"].keys()


@pytest.mark.parametrize("which", ["daemon", "backfill"])
def test_secret_is_a_mounted_file_at_the_path_the_settings_read(resources, which):
    workload = dict(zip(["daemon", "backfill"], _workloads(resources), strict=True))[which]
    pod = workload["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = _env(container)
    assert f"{PREFIX}SECRET" not in env
    secret_path = env[f"{PREFIX}SECRET_FILE"]["value"]
    directory, filename = posixpath.split(secret_path)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert mount["readOnly"] is True
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "recordsync"
    assert {"key": "secret", "path": filename} in volume["secret"]["items"]


@pytest.mark.parametrize("which", ["daemon", "backfill"])
def test_configuration_loads_as_valid_settings(resources, which, tmp_path):
    """ConfigMap + container env + the Secret's keys, as the pod sees them, load cleanly."""
    workload = dict(zip(["daemon", "backfill"], _workloads(resources), strict=True))[which]
    (container,) = _containers(workload)
    assert container["envFrom"] == [{"configMapRef": {"name": "recordsync"}}]
    configmap = resources["ConfigMap"]["data"]
    secret = tmp_path / "secret"
    secret.write_text("s" * 43, encoding="utf-8")
    secret.chmod(0o600)
    environ = dict(configmap)
    for name, item in _env(container).items():
        if "value" in item:
            environ[name] = item["value"]
        else:
            ref = item["valueFrom"]["secretKeyRef"]
            assert (ref["name"], ref["key"]) == ("recordsync", "database-url")
            environ[name] = "postgresql+psycopg://recordsync:pw@db:5432/warehouse"
    environ[f"{PREFIX}SECRET_FILE"] = str(secret)
    assert set(environ) - setting_variables() == set()
    settings = load_settings(environ)
    assert settings.merchant().history_from is not None
    assert settings.database_url.startswith("postgresql")


def test_daemon_and_backfill_share_settings_and_sizes(resources):
    (daemon,) = _containers(resources["Deployment"])
    (job,) = _containers(yaml_document(BACKFILL_JOB))
    assert daemon["envFrom"] == job["envFrom"]
    assert daemon["resources"] == job["resources"]
    assert daemon["securityContext"] == job["securityContext"]
    (image,) = yaml_document(KUSTOMIZATION)["images"]
    assert daemon["image"] == image["name"]  # kustomize replaces it with newName:newTag
    assert job["image"] == f"{image['newName']}:{image['newTag']}"


# -- round-end notifications ---------------------------------------------------------


def test_the_events_port_runs_from_settings_to_the_service(resources):
    (container,) = _containers(resources["Deployment"])
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    events_port = int(_env(container)[f"{PREFIX}EVENTS_PORT"]["value"])
    assert ports == {"metrics": DEFAULT_HTTP_PORT, "events": events_port}
    service_ports = {port["name"]: port for port in resources["Service"]["spec"]["ports"]}
    assert service_ports["events"]["targetPort"] == "events"


def test_the_example_ingress_serves_only_the_events_path_over_tls_without_rewriting():
    ingress = yaml_document(INGRESS_EXAMPLE)
    assert ingress["kind"] == "Ingress"
    spec = ingress["spec"]
    (tls,) = spec["tls"]
    (rule,) = spec["rules"]
    assert rule["host"] in tls["hosts"]
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/v1/round-events", "Exact")
    assert path["backend"]["service"]["port"] == {"name": "events"}
    annotations = ingress["metadata"].get("annotations", {})
    assert not any("rewrite" in key or "redirect" in key for key in annotations)
