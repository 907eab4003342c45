"""Fixtures that talk to the real services: Redis, OpenSearch (started by ops/up) and real
Celery worker processes started here. Tests use Redis database 15 and collections named
``t-<random>``, so they never touch a developer's data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("SITUATE_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ["SITUATE_REDIS_URL"] = os.environ["SITUATE_TEST_REDIS_URL"]
os.environ.pop("SITUATE_API_TOKEN", None)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
COOKBOOK = SHARED / "data" / "cookbook"
SITUATE = str(Path(sys.executable).with_name("situate"))
WORKER_LOGS: list[Path] = []


def _services_up() -> None:
    from workers.connections import opensearch_client, redis_client

    try:
        redis_client().ping()
        opensearch_client().cluster.health()
    except Exception as e:  # a failure, not a skip: these tests are the point
        pytest.fail(f"Redis/OpenSearch not reachable ({e}); run ops/up first (ops/test does)", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def services():
    _services_up()
    from workers.connections import redis_client

    redis_client().flushdb()
    yield


def start_worker(env_overrides: dict[str, str] | None = None, concurrency: int = 2, name: str | None = None):
    """A real ``situate worker`` process; its log goes to .services/logs/<name>.log."""
    env = dict(os.environ)
    env.update(env_overrides or {})
    name = name or f"test-{uuid.uuid4().hex[:6]}"
    (ROOT / ".services" / "logs").mkdir(parents=True, exist_ok=True)
    log = open(ROOT / ".services" / "logs" / f"{name}.log", "w")
    WORKER_LOGS.append(Path(log.name))
    proc = subprocess.Popen([SITUATE, "worker", "--concurrency", str(concurrency), "--hostname", f"{name}@%h",
                             "--loglevel", "INFO"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    from workers.app import app

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"worker exited with {proc.returncode}; see {log.name}")
        replies = app.control.ping(timeout=0.5)
        if any(f"{name}@" in k for r in replies for k in r):
            return proc
        time.sleep(0.5)
    raise RuntimeError("worker did not answer ping within 90 s")


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


SECRET_KEY = "sk-ant-test-SECRET-0123456789"
TEST_MODEL = "claude-3-haiku-20240307"


class StandIn:
    """The stand-in API (ops/standin.py) as a real HTTP server process."""

    def __init__(self):
        import httpx

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "ops" / "standin.py"), "--port", str(self.port),
                                      "--config", json.dumps(self.FAST)], start_new_session=True)
        self.http = httpx.Client(base_url=self.url, timeout=30)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.http.get("/standin/stats")
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    FAST = {"base_latency_s": 0.05, "uncached_s_per_ktok": 0.02, "read_s_per_ktok": 0.0, "output_s_per_tok": 0.001}

    def configure(self, **changes) -> None:
        """Set stand-in options (others back to the fast defaults); resets its cache and counters."""
        from dataclasses import asdict
        sys.path.insert(0, str(ROOT / "ops"))
        from standin import Config

        self.http.post("/standin/config", json={**asdict(Config()), **self.FAST, **changes}).raise_for_status()

    def stats(self) -> dict:
        return self.http.get("/standin/stats").json()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def standin():
    server = StandIn()
    # This process (searches, rerankers) and the workers it starts reach the paid APIs' stand-in.
    os.environ.update({"VOYAGE_API_KEY": SECRET_KEY, "VOYAGE_BASE_URL": f"{server.url}/v1",
                       "SITUATE_COHERE_URL": server.url, "CO_API_KEY": SECRET_KEY,
                       "AWS_ACCESS_KEY_ID": "AKIATESTSTANDIN", "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": server.url})
    yield server
    os.killpg(server.proc.pid, signal.SIGTERM)
    server.proc.wait(timeout=20)


@pytest.fixture(scope="session")
def worker(standin):
    """Real worker processes, started with an environment that *disagrees* with the
    collections the tests create: every test thereby checks that workers follow the stored
    collection settings, not their own environment. Paid APIs point at the stand-in."""
    proc = start_worker({"SITUATE_CONTEXTUALIZER": "none", "SITUATE_CHUNK_TOKENS": "40",
                         "SITUATE_LANGUAGE": "german",
                         "ANTHROPIC_API_KEY": SECRET_KEY, "ANTHROPIC_BASE_URL": standin.url,
                         "AWS_ACCESS_KEY_ID": "AKIATESTSTANDIN", "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                         "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": standin.url,
                         "SITUATE_RATE_LIMITS": json.dumps({TEST_MODEL: {"rpm": 100000, "itpm": 10**8, "otpm": 10**8}}),
                         "SITUATE_LLM_MAX_ATTEMPTS": "30", "SITUATE_LLM_MAX_DOCUMENT_TOKENS": "20000",
                         "SITUATE_BATCH_POLL_S": "0.5"},
                        concurrency=4)
    yield proc
    stop_worker(proc)


@pytest.fixture
def collection_name():
    name = f"t-{uuid.uuid4().hex[:10]}"
    yield name
    from workers import collections

    if collections.exists(name):
        collections.delete(name)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([SITUATE, *args], capture_output=True, text=True, env=full_env, timeout=timeout)


def cookbook_docs() -> list[dict]:
    return json.loads((COOKBOOK / "codebase_chunks.json").read_text())

