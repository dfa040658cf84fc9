"""How long a stop may take before SIGKILL: the same under systemd and Kubernetes, and enough
for a graceful stop (a platform request in flight runs to the HTTP timeout, then the page in
hand commits, the leases are given back and the others are told: about 2 s, measured in
docs/operations.md, "What happens when")."""

from __future__ import annotations

import pytest
from support.deployfiles import KUBERNETES, SYSTEMD, env_file, seconds, unit_file, yaml_document

from recordsync.core.settings import PREFIX, Settings

# After the request in flight: the page's commit, the releases and NOTIFY, the process's exit.
COMMIT_AND_HAND_OVER_S = 20
PAIRS = [
    pytest.param(SYSTEMD / "recordsync.service", KUBERNETES / "deployment.yaml", id="daemon"),
    pytest.param(
        SYSTEMD / "recordsync-backfill@.service", KUBERNETES / "backfill-job.yaml", id="backfill"
    ),
]


def _http_timeout() -> float:
    """The HTTP timeout both deployments run with: the env example's, the ConfigMap's, or the
    default; they must agree, or the two grace periods would cover different requests."""
    configured = {
        env_file(SYSTEMD / "recordsync.env.example").get(f"{PREFIX}HTTP_TIMEOUT"),
        yaml_document(KUBERNETES / "configmap.yaml")["data"].get(f"{PREFIX}HTTP_TIMEOUT"),
    }
    assert len(configured) == 1, f"HTTP timeouts differ: {configured}"
    (value,) = configured
    return Settings().http_timeout if value is None else float(value)


@pytest.mark.parametrize(("unit", "workload"), PAIRS)
def test_systemd_and_kubernetes_wait_as_long_for_a_graceful_stop(unit, workload):
    service = unit_file(unit)["Service"]
    assert service["KillSignal"] == ["SIGTERM"]
    systemd_grace = seconds(service["TimeoutStopSec"][-1])
    pod = yaml_document(workload)["spec"]["template"]["spec"]
    assert systemd_grace == pod["terminationGracePeriodSeconds"]
    assert systemd_grace >= _http_timeout() + COMMIT_AND_HAND_OVER_S
