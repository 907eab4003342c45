"""Redis failover in the middle of an ingest: a real master, a replica and three sentinels on
loopback; the master is killed with -9 and the sentinels promote the replica. Replication is
asynchronous, so what the master acknowledged in its last moments — broker messages, state
moves, checkpoints — may be missing on the new one: the pipeline must heal anyway (Kombu's
unacknowledged messages, the fair gate, the reconciler) and the audit is the other faults'."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from ops.harness import RedisServer, free_port, stop
from tests.faults.conftest import Pace, audit, documents, expected_of, report, submit, wait_done
from tests.faults.test_faults import LLM
from tests.support import use_services, wait_until
from workers.storage import checkpoints

MASTER = "situate-failover"


def _replication(server: RedisServer) -> dict[str, str]:
    return dict(line.split(":", 1) for line in server.cli("info", "replication").splitlines() if ":" in line)


def _sentinel(port: int, *args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=10).stdout


@pytest.fixture
def failover_redis(tmp_path):
    master, replica = RedisServer(tmp_path / "master"), RedisServer(tmp_path / "replica")
    replica.cli("replicaof", "127.0.0.1", str(master.port))
    wait_until(lambda: _replication(replica).get("master_link_status") == "up", 30, "the replica to sync")
    sentinels = []
    for i in range(3):
        port = free_port()
        conf = tmp_path / f"sentinel-{i}.conf"
        conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                        f"sentinel monitor {MASTER} 127.0.0.1 {master.port} 2\n"
                        f"sentinel down-after-milliseconds {MASTER} 1500\n"
                        f"sentinel failover-timeout {MASTER} 10000\n")
        sentinels.append((subprocess.Popen(["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL,
                                           start_new_session=True), port))
    wait_until(lambda: all("num-other-sentinels\n2" in _sentinel(p, "sentinel", "master", MASTER) for _, p in sentinels),
               30, "the sentinels to find each other", step=0.3)
    url = ";".join(f"sentinel://127.0.0.1:{p}/0" for _, p in sentinels)
    os.environ["SITUATE_REDIS_SENTINEL_MASTER"] = MASTER
    try:
        with use_services(redis_url=url):
            yield master, replica, sentinels
    finally:
        os.environ.pop("SITUATE_REDIS_SENTINEL_MASTER", None)
        for proc, _ in sentinels:
            stop(proc)
        replica.stop()
        master.stop()


def test_redis_master_killed_mid_run_the_replica_takes_over(failover_redis, standin, fleet, collection_name):
    master, replica, sentinels = failover_redis
    standin.configure()
    fleet(SITUATE_RECOVERY_S="5", SITUATE_RECONCILE_AFTER_S="15", SITUATE_RECONCILE_EVERY_S="3").start(2)
    docs = documents(60, tag="failover")
    submitted = time.monotonic()
    submit(collection_name, docs, **LLM)
    pace = Pace.of_first(collection_name, submitted)
    fault = time.time()
    offsets = _replication(master).get("master_repl_offset"), _replication(replica).get("slave_repl_offset")
    os.kill(master.proc.pid, signal.SIGKILL)
    wait_until(lambda: _replication(replica).get("role") == "master", 60, "the sentinels to promote the replica")
    promoted_s = time.time() - fault
    # A call is exposed from its request until a replica confirms its checkpoint: the stand-in
    # sees the request and the answer, and the confirmation follows the answer by up to WAIT's
    # timeout plus the worker's own time to write. So the calls that can be paid twice are those
    # in flight from that long before the kill until the new master is serving.
    exposed_before_s = checkpoints.REPLICA_WAIT_MS / 1000 + 1.0
    in_flight = standin.in_flight_during(fault - exposed_before_s, time.time() + 5)
    took = wait_done(collection_name, [d["id"] for d in docs], timeout=pace.deadline(len(docs), extra_s=60 + 15))
    result = audit(collection_name, expected_of(docs), standin)
    report("Redis master killed -9, replica promoted", result, in_flight=in_flight,
           promoted_after_s=round(promoted_s, 1), offsets_at_kill=list(offsets), done_s_after_kill=round(took, 1))
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0 and result.paid_twice <= in_flight
