"""Redis behind Sentinel: the broker (Kombu's sentinel transport) and our own state (redis-py's
Sentinel) both follow the master the sentinels name; a real master and sentinel process each."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from ops.harness import RedisServer, Worker, free_port, stop
from tests.support import run_cli, wait_until, write_jsonl


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sentinel")
    master, sentinel_port = RedisServer(folder / "master"), free_port()
    master_port = master.port
    conf = folder / "sentinel.conf"
    conf.write_text(f"port {sentinel_port}\nbind 127.0.0.1\ndir {folder}\n"
                    f"sentinel monitor situate-main 127.0.0.1 {master_port} 1\n"
                    "sentinel down-after-milliseconds situate-main 5000\n")
    watcher = subprocess.Popen(["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL)
    wait_until(lambda: subprocess.run(["redis-cli", "-p", str(sentinel_port), "sentinel", "get-master-addr-by-name",
                                       "situate-main"], capture_output=True, text=True).stdout.split()
               == ["127.0.0.1", str(master_port)], 30, "the sentinel to name the master")
    yield {"SITUATE_REDIS_URL": f"sentinel://127.0.0.1:{sentinel_port}/0",
           "SITUATE_REDIS_SENTINEL_MASTER": "situate-main"}, master_port
    stop(watcher)
    master.stop()


def test_ingest_and_search_through_sentinel(sentinel, tmp_path):
    env, master_port = sentinel
    name = f"t-sentinel-{uuid.uuid4().hex[:6]}"
    worker = Worker(2, env=env, name=f"sentinel-{uuid.uuid4().hex[:6]}")
    try:
        path = write_jsonl(tmp_path / "d.jsonl", [
            {"id": "otters", "text": "Sea otters hold hands while they sleep so they do not drift apart."},
            {"id": "kernel", "text": "The kernel scheduler balances runnable tasks across the CPU cores."}])
        ingested = run_cli("ingest", "-c", name, "--json", path, env=env, timeout=300)
        assert ingested.returncode == 0, ingested.stderr
        assert json.loads(ingested.stdout)["indexed"] == 2
        hits = json.loads(run_cli("search", "-c", name, "--json", "otters sleeping", env=env).stdout)["hits"]
        assert hits[0]["doc_id"] == "otters"
    finally:
        worker.stop()
        run_cli("drop", "-c", name, "--yes", env=env)
    # It all went to the master the sentinel named: our state, and the broker's lists.
    keys = subprocess.run(["redis-cli", "-p", str(master_port), "--scan", "--pattern", "situate:*"],
                          capture_output=True, text=True).stdout.split()
    assert any(k.startswith("situate:metrics:") for k in keys) and any(k.startswith("situate:workers:") for k in keys)


def test_a_sentinel_url_without_the_master_name_is_a_clear_error(sentinel):
    env, _ = sentinel
    result = run_cli("status", env={**env, "SITUATE_REDIS_SENTINEL_MASTER": ""})
    assert result.returncode != 0 and "SITUATE_REDIS_SENTINEL_MASTER" in (result.stderr + result.stdout)
