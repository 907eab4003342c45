"""The Helm chart as the tests read it: rendered by the pinned ``helm`` (``ops/lib.sh``'s
``install_helm``), parsed into Kubernetes objects."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "ops" / "helm" / "situate"
KUBERNETES = "1.30.0"  # the version rendered for and validated against
# What a user must give (the chart refuses to render without them).
REQUIRED = {"redis.url": "redis://redis:6379/0", "opensearch.url": "http://opensearch:9200",
            "secrets.apiToken": "t0ken", "secrets.flowerPassword": "pw"}


def helm() -> str:
    found = os.environ.get("SITUATE_HELM") or shutil.which("helm") or str(ROOT / ".services" / "bin" / "helm")
    if not Path(found).is_file():
        raise RuntimeError(f"no helm at {found}: ops/test installs it (ops/lib.sh install_helm)")
    return found


def keda_crds() -> dict[str, dict[str, Any]]:
    """KEDA's own CRDs (its Go module, pinned in ops/lib.sh): kind -> the served version's schema."""
    done = subprocess.run(["bash", "-c", 'source ops/lib.sh && go_module "$KEDA_MODULE" "$KEDA_SUM"'], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    schemas = {}
    for path in (Path(done.stdout.strip()) / "config" / "crd" / "bases").glob("keda.sh_*.yaml"):
        crd = yaml.safe_load(path.read_text())
        version = next(v for v in crd["spec"]["versions"] if v["served"])
        schemas[crd["spec"]["names"]["kind"]] = {"apiVersion": f"{crd['spec']['group']}/{version['name']}",
                                                 "schema": version["schema"]["openAPIV3Schema"]}
    return schemas


def values_args(values: dict[str, str]) -> list[str]:
    return [arg for key, value in {**REQUIRED, **values}.items() for arg in ("--set", f"{key}={value}")]


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), *args], capture_output=True, text=True, timeout=120, check=False)


def render(values: dict[str, str] | None = None, namespace: str = "situate") -> list[dict[str, Any]]:
    done = run_helm("template", "situate", str(CHART), "--namespace", namespace, "--kube-version", KUBERNETES,
                    *values_args(values or {}))
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def by_name(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in of_kind(objects, kind)}
