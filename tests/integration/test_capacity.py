"""Near Redis's memory limit, producers wait instead of filling it: the API answers 503 with
Retry-After, the CLI pauses, and both go on once the workers have drained it."""

from __future__ import annotations

import json
import subprocess
import time

import httpx
import pytest

from harness import SITUATE, Api
from workers.connections import redis_client

TOKEN = "capacity-admin-token"


@pytest.fixture
def nearly_full_redis():
    r = redis_client()
    before = r.config_get("maxmemory")["maxmemory"]
    used = int(r.info("memory")["used_memory"])
    r.config_set("maxmemory", int(used / 0.9))  # 90% used: over the 85% high-water mark
    yield r
    r.config_set("maxmemory", before)


def test_producers_wait_near_the_memory_limit(worker, collection_name, tmp_path, nearly_full_redis):
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
