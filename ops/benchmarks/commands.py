"""``ops/bench commands``: what the pipeline asks of Redis, counted by Redis itself.

The cookbook's documents (their own chunks, the offline default contextualizer, the default
embedder) through real workers and ``situate ingest``, on a Redis of the benchmark's own so that
every command it counts is ours: ``CONFIG RESETSTAT`` before, ``INFO commandstats`` after, every
client included (the producer, the workers' parents and pool children, Kombu, Celery). Printed:
commands per chunk and per document in all, LLEN per document, and each command's share.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from ops.benchmarks.common import CORPUS
from ops.harness import SITUATE, RedisServer, Worker


def commandstats(url: str) -> dict[str, int]:
    import redis

    client = redis.Redis.from_url(url)
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in client.info("commandstats").items()}


def run(documents: int, workers: int, concurrency: int) -> dict[str, Any]:
    import redis

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp) / "redis")
        url = server.url()
        env = {"SITUATE_REDIS_URL": url}
        files = json.loads((CORPUS / "codebase_chunks.json").read_text())[:documents]
        source = Path(tmp) / "cookbook.json"
        source.write_text(json.dumps(files))
        chunks = sum(len(f["chunks"]) for f in files)
        name = f"bench-commands-{uuid.uuid4().hex[:6]}"
        started = [Worker(concurrency, env=env, name=f"bench-commands-{uuid.uuid4().hex[:4]}") for _ in range(workers)]
        try:
            time.sleep(2)  # the workers' start-up (their first heartbeats) is not the documents' work
            redis.Redis.from_url(url).config_resetstat()
            t0 = time.perf_counter()
            done = subprocess.run([SITUATE, "ingest", "-c", name, "--format", "cookbook", str(source),
                                   "--json"], capture_output=True, text=True, env={**os.environ, **env},
                                  timeout=3600)
            seconds = time.perf_counter() - t0
            if done.returncode:
                raise RuntimeError(done.stderr[-2000:])
            calls = commandstats(url)
        finally:
            for w in started:
                w.stop()
            server.stop()
            from workers.connections import opensearch_client

            opensearch_client().indices.delete(index=f"situate-{name}*", ignore_unavailable=True)
    total = sum(calls.values())
    return {"documents": documents, "chunks": chunks, "seconds": round(seconds, 1), "commands": total,
            "per_chunk": round(total / chunks, 1), "per_document": round(total / documents, 1),
            "llen_per_document": round(calls.get("llen", 0) / documents, 1),
            "by_command_per_document": {k: round(v / documents, 1) for k, v in
                                        sorted(calls.items(), key=lambda kv: -kv[1]) if v >= documents / 10}}


def bench_commands(args: Any) -> None:
    row = run(args.documents, args.workers, args.concurrency)
    print(json.dumps(row), flush=True)
    print(f"\n{row['documents']} cookbook documents, {row['chunks']} chunks, offline default, in {row['seconds']} s: "
          f"{row['commands']:,} Redis commands, {row['per_chunk']} per chunk (target <= 20), "
          f"{row['per_document']} per document; LLEN {row['llen_per_document']} per document (target <= 10)")
    print(f"{'command':24} {'per document':>12}")
    for name, n in row["by_command_per_document"].items():
        print(f"{name:24} {n:12.1f}")
