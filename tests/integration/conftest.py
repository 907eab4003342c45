"""Fixtures that talk to the real services: Redis and OpenSearch (started by ops/up), real
Celery worker processes and the stand-in API (both through ``ops/harness.py``). Tests use
Redis database 15 and collections named ``t-<random>``, so they never touch a developer's data."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from ops.harness import StandIn, Worker
from tests.support import SECRET_KEY, TEST_MODEL, reread_environment

WORKERS: list[Worker] = []


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


def worker_logs() -> str:
    return "".join(w.log.read_text(errors="replace") for w in WORKERS)


# Fast answers for tests: ~50 ms per call.
FAST = {"base_latency_s": 0.05, "uncached_s_per_ktok": 0.02, "read_s_per_ktok": 0.0, "output_s_per_tok": 0.001}


@pytest.fixture(scope="session")
def standin():
    server = StandIn(FAST)
    # This process (searches, rerankers) and the workers it starts reach the paid APIs' stand-in.
    os.environ.update({"VOYAGE_API_KEY": SECRET_KEY, "VOYAGE_BASE_URL": f"{server.url}/v1",
                       "SITUATE_COHERE_URL": server.url, "CO_API_KEY": SECRET_KEY,
                       "AWS_ACCESS_KEY_ID": "AKIATESTSTANDIN", "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": server.url})
    from producers.retrieval import rerankers
    from workers.embedding import registry

    reread_environment()
    registry.get.cache_clear()  # built before, they would reach another endpoint
    rerankers.get.cache_clear()
    yield server
    server.close()


@pytest.fixture(scope="session")
def worker(standin):
    """Real worker processes, started with an environment that *disagrees* with the
    collections the tests create: every test thereby checks that workers follow the stored
    collection settings, not their own environment. Paid APIs point at the stand-in."""
    proc = Worker(concurrency=4, name=f"test-{uuid.uuid4().hex[:6]}", env={
        "SITUATE_CONTEXTUALIZER": "none", "SITUATE_CHUNK_TOKENS": "40", "SITUATE_LANGUAGE": "german",
        "ANTHROPIC_API_KEY": SECRET_KEY, "ANTHROPIC_BASE_URL": standin.url,
        "AWS_ACCESS_KEY_ID": "AKIATESTSTANDIN", "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": standin.url,
        "SITUATE_RATE_LIMITS": json.dumps({TEST_MODEL: {"rpm": 100000, "itpm": 10**8, "otpm": 10**8}}),
        "SITUATE_PROVIDER_MAX_ATTEMPTS": "30", "SITUATE_LLM_MAX_DOCUMENT_TOKENS": "20000",
        "SITUATE_BATCH_POLL_S": "0.5", "SITUATE_BATCH_WAIT_S": "1", "SITUATE_BATCH_MAX_BYTES": "2000000",
        # Idle indices are merged by test_compaction's own worker, when it says so.
        "SITUATE_COMPACT_IDLE_S": "0"})
    WORKERS.append(proc)
    yield proc
    proc.stop()


@pytest.fixture
def collection_name():
    name = f"t-{uuid.uuid4().hex[:10]}"
    yield name
    from workers import lifecycle
    from workers.storage import catalog

    if catalog.exists(name):
        lifecycle.delete(name)
