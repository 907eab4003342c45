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

FOLDER_MARKERS = ("unit", "integration", "faults")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if folder in FOLDER_MARKERS:
            item.add_marker(folder)
