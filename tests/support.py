"""Helpers the integration tests share: the CLI as a subprocess, in-process ingest, the corpora."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ops.harness import ROOT, SITUATE, Api, RedisServer

SHARED = ROOT.parent / "shared"
COOKBOOK = SHARED / "data" / "cookbook"
SECRET_KEY = "sk-ant-test-SECRET-0123456789"
TEST_MODEL = "claude-haiku-5-5"  # caches from 512 tokens (the seeds; workers/models.py)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``situate ARGS`` in a subprocess: for tests whose point is the command line itself."""
    # Wide: Rich wraps and cuts error boxes to the terminal's width.
    return subprocess.run([SITUATE, *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250", **(env or {})}, timeout=timeout)


def cookbook_docs() -> list[dict]:
    return json.loads((COOKBOOK / "codebase_chunks.json").read_text())


def ingest(collection: str, docs: list[dict[str, Any]], timeout: float = 300, **settings: Any) -> dict[str, dict]:
    """Documents ``{"id", "text", "metadata"?, "chunks"?}`` through the same submit and wait as
    ``situate ingest``, in this process; returns the final state per doc_id, searchable."""
    from producers.ingest.submit import new_run, submit_when_free, wait
    from workers import lifecycle
    from workers.documents.validation import RawDocument
    from workers.storage import chunk_index

    config = lifecycle.ensure(collection, **settings)
    raws = []
    for d in docs:
        chunks = d.get("chunks")
        if chunks is not None:
            chunks = [c if isinstance(c, dict) else {"n": i, "text": c} for i, c in enumerate(chunks)]
        raws.append(RawDocument(d["id"], d["text"], d.get("metadata") or {}, chunks))
    run = new_run()  # as the CLI does: one run, waiting out the seconds a reindex takes to switch generations
    final = wait(config, [submit_when_free(config, raw, run, poll_s=0.5) for raw in raws], timeout=timeout)
    chunk_index.refresh(config)
    return final


def write_jsonl(path: Path, docs: list[dict]) -> str:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return str(path)


def wait_for(predicate: Callable[[], Any], timeout: float = 60, step: float = 0.2) -> Any:
    """Poll ``predicate`` until it returns something truthy or ``timeout`` passes; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.2) -> Any:
    """``wait_for``, failing the test with ``what`` when the time is up."""
    value = wait_for(predicate, timeout, step)
    if not value:
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
    return value


@contextmanager
def running_api(env: dict[str, str], secret: str | None = None) -> Iterator[Api]:
    """An API process for a test module; ``secret`` (a token it was given) must not be in its log."""
    server = Api(env=env)
    try:
        yield server
    finally:
        server.stop()
    if secret is not None:
        assert secret not in server.output(), "a token leaked into the API's log"


def reread_environment() -> None:
    """Settings and credentials are read once per process; a test that changes the environment
    of this process has them read again."""
    from workers.settings import get_credentials, get_settings

    get_settings.cache_clear()
    get_credentials.cache_clear()


@contextmanager
def use_services(redis_url: str | None = None, opensearch_url: str | None = None) -> Iterator[None]:
    """This test process on other services for a while: its settings, clients and the Celery
    app it sends with follow, and so do the workers it starts (they inherit the environment). A test
    that restarts or squeezes a Redis or an OpenSearch does so on its own, never on the ones
    the other tests (and the other pytest processes) are using."""
    from workers import connections
    from workers.pipeline import sending
    from workers.settings import get_settings

    changes = {"SITUATE_REDIS_URL": redis_url, "SITUATE_OPENSEARCH_URL": opensearch_url}
    saved = {k: os.environ.get(k) for k, v in changes.items() if v is not None}

    def follow() -> None:
        get_settings.cache_clear()
        for client in (connections.redis_client, connections.redis_bytes_client, connections.opensearch_client,
                       connections.opensearch_search_client):
            client.cache_clear()
        app = sending.app()  # the worker's app if this process imported it, else the send-only one
        app.conf.broker_url = get_settings().redis_url
        options = {k: v for k, v in app.conf.broker_transport_options.items() if k not in ("master_name", "sentinel_kwargs")}
        app.conf.broker_transport_options = {**options, **connections.broker_transport_extras()}  # a Sentinel's master
        # Kombu keeps a pool per broker URL: dropping ours makes the app ask for the new URL's
        # (closing it would close the one it hands back when we switch back).
        app._pool = None
        app.amqp._producer_pool = None

    os.environ.update({k: v for k, v in changes.items() if v is not None})
    follow()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        follow()


@contextmanager
def redis_of_its_own(tmp_path_factory: Any, name: str) -> Iterator[RedisServer]:
    """A Redis of a module's own (broker and state), this process and the workers it starts on it:
    for tests that restart it, or whose workers must take no other test's messages."""
    server = RedisServer(tmp_path_factory.mktemp(name))
    with use_services(redis_url=server.url()):
        yield server
    server.stop()


@contextmanager
def round_trips(client: Any) -> Iterator[list[int]]:
    """What ``client`` sends while the block runs, one entry a round trip (a pipeline is one):
    every connection it hands out meanwhile counts its writes, and is given back as it was."""
    sent: list[int] = []
    wrapped: dict[Any, Any] = {}
    real = client.connection_pool.get_connection

    def counting(*args: Any, **kwargs: Any) -> Any:
        connection = real(*args, **kwargs)
        if connection not in wrapped:
            original = wrapped[connection] = connection.send_packed_command

            def send(command: Any, *a: Any, **k: Any) -> Any:
                sent.append(1)
                return original(command, *a, **k)
            connection.send_packed_command = send
        return connection

    client.connection_pool.get_connection = counting
    try:
        yield sent
    finally:
        client.connection_pool.get_connection = real
        for connection, original in wrapped.items():
            connection.send_packed_command = original
