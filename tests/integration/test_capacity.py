"""Near Redis's memory limit, producers wait instead of filling it: the API answers 503 with
Retry-After, the CLI pauses, and both go on once the workers have drained it."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import httpx
import pytest

from ops.harness import SITUATE, Api, RedisServer, Worker
from tests.support import use_services
from workers.connections import redis_client

TOKEN = "capacity-admin-token"


@pytest.fixture
def nearly_full_redis(tmp_path):
    """A Redis of this test's own, squeezed to 90% of its memory line (over the 85% high-water
    mark), with a worker on it: the line is the server's, so on the shared Redis the squeeze
    would stall every other test."""
    server = RedisServer(tmp_path / "redis")
    with use_services(redis_url=server.url()):
        worker = Worker(2, name=f"capacity-{uuid.uuid4().hex[:6]}")
        try:
            r = redis_client()
            # 16 MB of ballast, as a working Redis holds: a fresh one uses ~1 MB, and there its
            # own ups and downs of tens of kB would cross the 85% line by themselves.
            pipe = r.pipeline(transaction=False)
            for i in range(256):  # in small pieces: one big SET leaves a query buffer as big behind
                pipe.set(f"ballast:{i}", b"x" * 2**16)
            pipe.execute()
            r.config_set("maxmemory", int(int(r.info("memory")["used_memory"]) / 0.9))
            yield r
        finally:
            worker.stop()
            server.stop()


def test_producers_wait_near_the_memory_limit(nearly_full_redis, collection_name, tmp_path):
    api = Api(env={"SITUATE_API_TOKEN": TOKEN})
    try:
        r = httpx.post(f"{api.url}/v1/collections/{collection_name}/documents", headers={"Authorization": f"Bearer {TOKEN}"},
                       json={"id": "a", "text": "Otters nap."})
        assert r.status_code == 503 and r.headers["retry-after"].isdigit()
        path = tmp_path / "d.jsonl"
        path.write_text(json.dumps({"id": "b", "text": "Otters float."}) + "\n")
        cli = subprocess.Popen([SITUATE, "ingest", "-c", collection_name, str(path), "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(4)
        assert cli.poll() is None, "the CLI must wait, not fail or overfill"
        nearly_full_redis.config_set("maxmemory", 0)  # drained (here: the line lifted)
        out, err = cli.communicate(timeout=120)
        assert cli.returncode == 0, err
        assert json.loads(out)["indexed"] == 1
    finally:
        api.stop()
