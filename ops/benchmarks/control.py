"""``ops/bench control``: what the control plane costs with 10k, 100k and 1M documents' states
in Redis — ``situate status``, ``situate failed`` (a page), ``/metrics``, the dashboard's data,
the collection listing and a reconciler pass — each timed in this process (the command's or the
route's own work, without an interpreter's start), and ``situate status`` again as a whole
command beside ``situate --help`` (what starting the command costs) for reference.

The states are synthetic, in a Redis of its own, laid out as the state scripts lay them out: per
document its hash (version, seq, hashes, counts), the collection's document set and counts, 98%
indexed, 1% failed (in the failed index), 1% in flight (in the in-flight index, their work
parked in the fair gate). None of the timed paths may read every document: their time must not
grow with the number of documents.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from ops.harness import SITUATE, RedisServer

SIZES = (10_000, 100_000, 1_000_000)
COLLECTION = "bench-control"
REPEAT = 5


def _populate(r, start: int, n: int) -> None:
    from workers import keys
    from workers.storage import fairqueue, states

    now = time.time()
    queue = "contextualize.0"
    line = keys.fair_line(queue, COLLECTION)
    if not r.exists(keys.fair_ring(queue)):
        r.rpush(keys.fair_ring(queue), COLLECTION)
    for lo in range(start, start + n, 10_000):
        pipe = r.pipeline(transaction=False)
        members, counts, failed, moving, waiting, entries = [], {"indexed": 0, "failed": 0, "chunked": 0}, {}, {}, {}, []
        for i in range(lo, min(lo + 10_000, start + n)):
            doc = f"reports/{i // 1000:04d}/doc-{i:07d}.pdf"
            version = hashlib.sha256(doc.encode()).hexdigest()[:20]
            state = "failed" if i % 100 == 1 else "chunked" if i % 100 == 2 else "indexed"
            fields = {"state": state, "version": version, "seq": i, "meta_hash": version[:16], "chunks": 12,
                      "chunks_total": 12, "submitted": f"{now:.3f}", "updated": f"{now:.3f}", "size": 2048}
            if state == "indexed":
                fields["indexed_version"] = version
            elif state == "failed":
                fields["error"] = "chunk stage: the file is not a PDF (a synthetic failure)"
                failed[doc] = now - i
            else:
                fields["backlog"] = 2048
                m = states.member(COLLECTION, doc)
                moving[m] = now - 3600 + i * 1e-6
                waiting[m] = 1
                entries.append(json.dumps({"id": f"e{i}", "task": "situate.contextualize", "args": [COLLECTION, doc, version],
                                           "priority": 0, "at": now, "queue": queue, "collection": COLLECTION}))
            pipe.hset(keys.doc(COLLECTION, doc), mapping=fields)
            members.append(doc)
            counts[state] += 1
        pipe.sadd(keys.docs(COLLECTION), *members)
        for state, k in counts.items():
            pipe.hincrby(keys.counts(COLLECTION), state, k)
        pipe.zadd(keys.failed(COLLECTION), failed)
        pipe.set(keys.failed_indexed(COLLECTION), "1")
        pipe.zadd(states.MOVING, moving)
        pipe.rpush(line, *entries)
        pipe.hset(fairqueue.WAITING, mapping=waiting)
        pipe.incrby(fairqueue.WAITING_TOTAL, len(waiting))
        pipe.incrby(keys.BACKLOG, 2048 * len(waiting))
        pipe.execute()


def _timed(fn) -> float:
    """The median of ``REPEAT`` runs, in ms (the first, which warms caches and connections, dropped)."""
    fn()
    times = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def _operations():
    from typer.testing import CliRunner

    from producers.cli.main import cli
    from producers.web import dashboard, fleet, prometheus
    from workers.pipeline import reconcile

    runner = CliRunner()

    def command(*args: str):
        def run():
            result = runner.invoke(cli, list(args))
            assert result.exit_code == 0, result.output
        return run

    return {
        "situate status --json": command("status", "--json"),
        "situate failed (a page of 100)": command("failed", "-c", COLLECTION, "--json"),
        "/metrics": prometheus.render,
        "the dashboard's data": dashboard.build,
        "collection listing": fleet.collections,
        # Two hours on: every document in flight has stalled again since the last pass touched it,
        # so each pass examines all of them (1% of the documents), as the first one does.
        "a reconciler pass (the 1% in flight)": lambda: reconcile.reconcile_once(now=time.time() + 7200),
    }


def _wall(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([SITUATE, *args], check=True, capture_output=True, env=env)
    return (time.perf_counter() - t0) * 1000


def bench_control(args) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-control-"))
    server = RedisServer(folder)
    os.environ["SITUATE_REDIS_URL"] = server.url()
    env = {**os.environ, "SITUATE_REDIS_URL": server.url()}
    from workers import connections, lifecycle
    from workers.pipeline.app import app
    from workers.settings import get_settings

    get_settings.cache_clear()
    connections.redis_client.cache_clear()
    app.conf.broker_url = server.url()
    r = connections.redis_client()
    sizes = [s for s in SIZES if s <= args.documents]
    rows: dict[str, list[float]] = {}
    walls: list[tuple[float, float]] = []
    try:
        lifecycle.ensure(COLLECTION, contextualizer="none", embedder="local")
        ops = _operations()
        populated = 0
        for size in sizes:
            _populate(r, populated, size - populated)
            populated = size
            for name, fn in ops.items():
                rows.setdefault(name, []).append(_timed(fn))
            walls.append((_wall(["status", "--json"], env), _wall(["--help"], env)))
            used = r.info("memory")["used_memory"]
            print(f"{size:>9,} documents: Redis {used / 1e6:,.0f} MB ({used / size:,.0f} B a document, every key)",
                  flush=True)
    finally:
        try:
            lifecycle.delete(COLLECTION)
        except Exception:  # noqa: BLE001 - the private Redis goes anyway; the index is dropped below
            pass
        server.stop()
    print(f"\n{'ms (median of ' + str(REPEAT) + ')':34}" + "".join(f"{s:>12,}" for s in sizes))
    for name, values in rows.items():
        print(f"{name:34}" + "".join(f"{v:12.1f}" for v in values))
    print(f"{'situate status --json, the command':34}" + "".join(f"{w:12.0f}" for w, _ in walls))
    print(f"{'situate --help (its start alone)':34}" + "".join(f"{h:12.0f}" for _, h in walls))
