"""The Helm chart (ops/helm/situate): it lints and renders clean, every object is valid for
Kubernetes (and KEDA's CRDs), each worker kind has one scaler that counts its whole backlog,
and the pods are set up to be stopped without losing work."""

from __future__ import annotations

import math
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.deploy.chart import CHART, KUBERNETES, by_name, keda_crds, of_kind, render, run_helm, values_args
from workers.pipeline.routing import all_queues
from workers.settings import get_settings

# The shapes a user picks: KEDA (the default), an HPA on Prometheus's metric, fixed replicas, the
# Redis for trying it out, and a fleet of 8 shards with both kinds scaled to zero.
SHAPES: dict[str, dict[str, str]] = {
    "keda": {},
    "hpa": {"autoscaling.mode": "hpa"},
    "fixed": {"autoscaling.mode": "none"},
    "redis": {"redis.enabled": "true", "redis.url": ""},
    "zero": {"settings.shards": "8", "workers.cpu.autoscaling.minReplicas": "0"},
}


def test_lint_is_clean() -> None:
    done = run_helm("lint", "--strict", str(CHART), "--kube-version", KUBERNETES, *values_args({}))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


def test_required_values_are_asked_for() -> None:
    done = run_helm("template", "situate", str(CHART), "--kube-version", KUBERNETES)
    assert done.returncode != 0 and "is required" in done.stderr


@pytest.mark.parametrize("shape", SHAPES)
def test_every_object_is_valid(shape: str) -> None:
    crds = keda_crds()
    objects = render(SHAPES[shape])
    assert objects
    for o in objects:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] in crds:
            assert o["apiVersion"] == crds[o["kind"]]["apiVersion"], name
            jsonschema.validate(o, crds[o["kind"]]["schema"])  # raises with the path of what is wrong
        else:
            kubernetes_validate.validate(o, KUBERNETES, strict=True)


def worker_queues(deployment: dict[str, Any]) -> list[str]:
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    return command[command.index("--queues") + 1].split(",")


def scaler_queues(scaler: dict[str, Any]) -> list[str]:
    if scaler["kind"] == "ScaledObject":
        (trigger,) = scaler["spec"]["triggers"]
        # Never KEDA's redis scaler: it reads one list, and Kombu keeps one per priority level.
        assert trigger["type"] == "metrics-api", trigger
        url = trigger["metadata"]["url"]
        assert "/v1/backlog?queues=" in url and trigger["metadata"]["valueLocation"] == "backlog"
        return url.split("queues=", 1)[1].split(",")
    (metric,) = scaler["spec"]["metrics"]
    assert metric["external"]["metric"]["name"] == "situate_queue_backlog"
    (expression,) = metric["external"]["metric"]["selector"]["matchExpressions"]
    assert expression["key"] == "queue" and expression["operator"] == "In"
    return list(expression["values"])


@pytest.mark.parametrize("shape", ["keda", "hpa", "zero"])
def test_each_queue_is_covered_by_exactly_one_scaler(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render(SHAPES[shape])
    shards = int(SHAPES[shape].get("settings.shards", "4"))
    monkeypatch.setenv("SITUATE_SHARDS", str(shards))
    get_settings.cache_clear()
    try:
        expected = all_queues()  # every queue situate makes, with this many shards
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    workers = {name: d for name, d in by_name(objects, "Deployment").items() if "-worker-" in name}
    scalers = of_kind(objects, "ScaledObject") + of_kind(objects, "HorizontalPodAutoscaler")
    assert len(scalers) == len(workers) >= 2
    covered: list[str] = []
    for scaler in scalers:
        target = scaler["spec"]["scaleTargetRef"]["name"]
        queues = scaler_queues(scaler)
        assert queues == worker_queues(workers[target]), f"{target} scales on other queues than it consumes"
        covered += queues
    assert sorted(covered) == sorted(expected), "each queue once, none left out"


def test_llm_workers_scale_to_zero_and_cpu_workers_keep_one() -> None:
    objects = render()
    scalers = by_name(objects, "ScaledObject")
    llm, cpu = scalers["situate-worker-llm"]["spec"], scalers["situate-worker-cpu"]["spec"]
    assert llm["minReplicaCount"] == 0 and cpu["minReplicaCount"] == 1
    for spec in (llm, cpu):
        # active at the first message: a backlog above 0 wakes a kind scaled to zero
        assert spec["triggers"][0]["metadata"]["activationTargetValue"] == "0"
    auth = by_name(objects, "TriggerAuthentication")["situate-backlog"]["spec"]["secretTargetRef"]
    assert auth == [{"parameter": "token", "name": "situate-secrets", "key": "SITUATE_API_TOKEN"}]


def test_pods_stop_safely_and_run_unprivileged() -> None:
    objects = render({"redis.enabled": "true", "redis.url": ""})
    time_limit = get_settings().task_time_limit_s
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"]
            for d in of_kind(objects, "Deployment") + of_kind(objects, "StatefulSet")}
    budgets = {b["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
               for b in of_kind(objects, "PodDisruptionBudget")}
    for name, pod in pods.items():
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        (container,) = pod["containers"]
        assert container["securityContext"]["allowPrivilegeEscalation"] is False, name
        assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"], name
        assert container["resources"]["limits"]["memory"], name
        assert container.get("livenessProbe"), name
    for name, pod in pods.items():
        if "-worker-" in name:
            # a scale-down waits for the longest task to end
            assert pod["terminationGracePeriodSeconds"] >= time_limit, name
            probe = pod["containers"][0]["livenessProbe"]["exec"]["command"]
            assert probe == ["python", "-m", "workers.pipeline.liveness"], "never a broadcast (celery inspect ping)"
    api = pods["situate-api"]["containers"][0]
    assert api["readinessProbe"]["httpGet"]["path"] == "/readyz" and api["livenessProbe"]["httpGet"]["path"] == "/healthz"
    components = {d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]
                  for d in of_kind(objects, "Deployment")}
    assert components <= budgets, "a PodDisruptionBudget for each Deployment"
    redis = by_name(objects, "StatefulSet")["situate-redis"]["spec"]["template"]["spec"]["containers"][0]
    assert redis["args"][redis["args"].index("--appendonly") + 1] == "yes"
    assert redis["args"][redis["args"].index("--maxmemory-policy") + 1] == "noeviction"


def keda_replicas(metric: float, target: float, lo: int, hi: int) -> int:
    """KEDA's rule (the HPA's, fed by its metrics adapter): replicas = ceil(metric / target),
    within min and max."""
    return max(lo, min(hi, math.ceil(metric / target)))


def test_keda_rule() -> None:
    assert keda_replicas(0, 20, 1, 10) == 1 and keda_replicas(41, 20, 1, 10) == 3 and keda_replicas(999, 20, 0, 8) == 8
