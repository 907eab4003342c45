"""``ops/bench replicas``: the ``openai`` contextualizer over a fleet of replicas of your own, each
with its own prefix cache (``ops/standins/openai_fleet.py``: vLLM-like, blocks of 16 tokens in a
chain, LRU under a capacity, prefill one at a time per replica, a number of slots).

Four parts, the same documents (made from the public corpora, about 3,000 tokens each):

1. **4 replicas**, the three routings — ``affinity`` (a document's calls on one replica), ``round-robin``
   and ``least-loaded`` (each call on the next / the least busy replica): cache reads against what
   one cache shared by every replica, of the same total size, could have served for the same
   requests (replayed from the replicas' logs), prefill computed, replicas per document, and
   documents per second;
2. **1, 2 and 8 replicas**, affinity against round robin;
3. **a replica killed** (SIGKILL) mid-run: documents lost (must be none), documents moved (only
   the dead replica's), calls answered twice and calls computed again, against the calls in
   flight on it when it died;
4. **a replica added** mid-run, as an operator does it: a fourth replica started, workers with
   the four base URLs started, the old ones stopped warm: documents moved (none), the new
   replica's share of the documents begun after.

Workers run the chunk and contextualize queues only: the time measured is the LLM's (as
``ops/bench batches``). A run ends when every document is situated (or failed).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ops.benchmarks.common import DATA
from ops.harness import SITUATE, RedisServer, Worker
from ops.model_servers import OpenAIFleet
from ops.standins.cache import TOKEN
from ops.standins.openai_fleet import shared_cache_reads

MODEL = "standin-7b"
SLOTS = 8
# Per replica: 80,000 tokens of KV cache (a 7B model's on a 24 GB card), some 26 of these documents.
CAPACITY_BLOCKS = 5_000
# Prefill dominates: a document's ~3,000 tokens take 0.6 s to compute, its ~40-token answer 0.08 s.
REPLICA = {"slots": SLOTS, "capacity_blocks": CAPACITY_BLOCKS, "prefill_s_per_ktok": 0.2, "decode_s_per_tok": 0.002,
           "block_tokens": 16}
DOCUMENT_TOKENS = 3_000


def documents(path: Path, n: int, corpora: tuple[str, ...] = ("tech_faq_en", "debian_faq_fr")) -> int:
    """``n`` JSONL documents of about DOCUMENT_TOKENS stand-in tokens, windows over the public
    corpora's texts (by default English and French prose: reports and manuals, as users have
    them), each under a title line of its own."""
    texts: list[str] = []
    for corpus in corpora:
        for f in json.loads((DATA / corpus / "codebase_chunks.json").read_text()):
            texts.append(f["content"])
    joined = "".join(texts)
    spans, offset = [], 0
    for t in texts:  # token spans in the joined text
        spans.extend((offset + m.start(), offset + m.end()) for m in TOKEN.finditer(t))
        offset += len(t)
    step = max(1, (len(spans) - DOCUMENT_TOKENS) // max(1, n))
    with path.open("w") as out:
        for i in range(n):
            a = (i * step) % max(1, len(spans) - DOCUMENT_TOKENS)
            body = joined[spans[a][0]:spans[a + DOCUMENT_TOKENS - 1][1]]
            out.write(json.dumps({"id": f"doc-{i:05d}", "text": f"Report {i} of the fleet benchmark.\n\n{body}"}) + "\n")
    return n


def _env(fleet_urls: str, routing: str) -> dict[str, str]:
    return {"SITUATE_OPENAI_BASE_URLS": fleet_urls, "SITUATE_OPENAI_ROUTING": routing,
            "SITUATE_OPENAI_REPLICA_CONCURRENCY": str(SLOTS), "SITUATE_LLM_TIMEOUT_S": "30",
            "SITUATE_OPENAI_DOWN_S": "5", "SITUATE_ALLOWED_MODELS": "*"}


def _workers(env: dict[str, str], n: int = 2, documents_each: int = 16) -> list[Worker]:
    """Two workers of ``documents_each`` threads: by default 32 documents in flight, as many as the
    4 replicas' slots."""
    from workers.pipeline.routing import CHUNK_QUEUE, contextualize_queue
    from workers.settings import get_settings

    queues = ",".join([CHUNK_QUEUE] + [contextualize_queue(i) for i in range(get_settings().shards)])
    return [Worker(documents_each, ["--pool", "threads", "--queues", queues], env) for _ in range(n)]


def _submit(name: str, source: Path, env: dict[str, str]) -> int:
    ingest = subprocess.run([SITUATE, "ingest", "-c", name, "--contextualizer", "openai", "--model", MODEL,
                             "--no-wait", "--json", str(source)], capture_output=True, text=True,
                            env={**os.environ, **env}, timeout=600)
    if ingest.returncode:
        raise RuntimeError(f"ingest failed: {ingest.stderr[-2000:]}")
    return int(json.loads(ingest.stdout)["documents"])


def _settled(name: str) -> int:
    from workers.storage import states

    counts = states.counts(name)
    return sum(counts.get(s, 0) for s in ("situated", "failed", "indexed"))


def _wait(name: str, queued: int, timeout_s: float, during: Any = None) -> float:
    t0 = time.perf_counter()
    while _settled(name) < queued:
        if during is not None:
            during(_settled(name) / max(queued, 1))
        if time.perf_counter() - t0 > timeout_s:
            raise RuntimeError(f"{name}: {_settled(name)} of {queued} documents situated after {timeout_s:.0f} s")
        time.sleep(0.25)
    return time.perf_counter() - t0


def _summary(name: str, fleet: OpenAIFleet, queued: int, seconds: float, label: str) -> dict[str, Any]:
    from workers import lifecycle
    from workers.storage import catalog, states
    from workers.storage import replicas as replica_state

    lines = fleet.lines()
    answered = [x for x in lines if x.get("answered")]
    replicas_of: dict[str, set[str]] = defaultdict(set)
    for x in answered:
        replicas_of[x["document"]].add(x["replica"])
    pairs: dict[tuple[str, str], int] = defaultdict(int)
    for x in answered:
        pairs[(x["document"], x["chunk"])] += 1
    cached = sum(x["cached_tokens"] for x in answered)
    prompt = sum(x["prompt_tokens"] for x in answered)
    shared = shared_cache_reads(lines, CAPACITY_BLOCKS * len(fleet.ports), REPLICA["block_tokens"])
    moves = sum(r["moved_away"] for r in replica_state.snapshot().values())
    counts = states.counts(name)
    row = {"run": label, "replicas": len(fleet.ports), "documents": queued, "failed": counts.get("failed", 0),
           "seconds": round(seconds, 1), "documents_per_s": round(queued / seconds, 2), "calls": len(answered),
           "prompt_tokens": prompt, "cached_tokens": cached, "shared_cache_tokens": shared,
           "of_shared": round(cached / shared, 4) if shared else None,
           "prefill_tokens": prompt - cached, "replicas_per_document": round(
               sum(len(v) for v in replicas_of.values()) / max(1, len(replicas_of)), 2),
           "documents_on_two_or_more": sum(1 for v in replicas_of.values() if len(v) > 1),
           "answered_twice": sum(n - 1 for n in pairs.values() if n > 1),
           "computed_unanswered": sum(1 for x in lines if "prefill_start" in x and not x.get("answered")),
           "documents_moved": moves}
    if catalog.exists(name):
        lifecycle.delete(name)
    return row


def _fresh() -> None:
    from workers.storage import replicas as replica_state

    replica_state.forget()


def run(source: Path, n_replicas: int, routing: str, label: str, timeout_s: float = 3600,
        documents_each: int = 16) -> dict[str, Any]:
    _fresh()
    fleet = OpenAIFleet(n_replicas, REPLICA)
    env = _env(fleet.urls, routing)
    workers = _workers(env, documents_each=documents_each)
    name = f"bench-replicas-{uuid.uuid4().hex[:6]}"
    try:
        t0 = time.perf_counter()
        queued = _submit(name, source, env)
        _wait(name, queued, timeout_s)
        return _summary(name, fleet, queued, time.perf_counter() - t0, label)
    finally:
        for w in workers:
            w.stop()
        fleet.close()


def run_killed(source: Path, timeout_s: float = 3600) -> dict[str, Any]:
    """Four replicas, affinity; replica 2 killed when 40% of the documents are situated."""
    _fresh()
    fleet = OpenAIFleet(4, REPLICA)
    env = _env(fleet.urls, "affinity")
    workers = _workers(env)
    name = f"bench-replicas-kill-{uuid.uuid4().hex[:6]}"
    killed: dict[str, Any] = {}

    def maybe_kill(done: float) -> None:
        if not killed and done >= 0.4:
            killed["at"] = time.time()
            fleet.kill(2)
            killed["documents_on_it"] = len({x["document"] for x in fleet.lines() if x["replica"] == "r2"})

    try:
        t0 = time.perf_counter()
        queued = _submit(name, source, env)
        _wait(name, queued, timeout_s, maybe_kill)
        lines = fleet.lines()
        # Calls the dead replica had and never answered: in flight (in a slot or its queue) when it died.
        lost = [x for x in lines if x["replica"] == "r2" and not x["answered"]]
        answered_elsewhere = {(x["document"], x["chunk"]) for x in lines if x["answered"] and x["replica"] != "r2"}
        computed_again = sum(1 for x in lost if "prefill_end" in x and (x["document"], x["chunk"]) in answered_elsewhere)
        row = _summary(name, fleet, queued, time.perf_counter() - t0, "affinity, 1 of 4 killed at 40%")
        row.update(in_flight_on_killed=len(lost), computed_again=computed_again,
                   documents_on_killed_before=killed.get("documents_on_it"))
        return row
    finally:
        for w in workers:
            w.stop()
        fleet.close()


def run_added(source: Path, timeout_s: float = 3600) -> dict[str, Any]:
    """Three replicas, affinity; at 40%, a fourth started and the workers rolled onto four URLs."""
    _fresh()
    fleet = OpenAIFleet(4, REPLICA)
    fleet.kill(3)  # not there yet
    three = ",".join(fleet.url(i) for i in range(3))
    workers = _workers(_env(three, "affinity"))
    name = f"bench-replicas-add-{uuid.uuid4().hex[:6]}"
    added: dict[str, Any] = {}

    def maybe_add(done: float) -> None:
        if not added and done >= 0.4:
            added["at"] = time.time()
            fleet.start(3)
            for w in workers:  # the old ones stopped warm (their tasks finish), then the new ones started:
                w.stop()       # workers that know other replicas than their peers move what they cannot reach
            workers.extend(_workers(_env(fleet.urls, "affinity")))
            added["documents_before"] = len({x["document"] for x in fleet.lines()})

    try:
        t0 = time.perf_counter()
        queued = _submit(name, source, _env(three, "affinity"))
        _wait(name, queued, timeout_s, maybe_add)
        lines = [x for x in fleet.lines() if x.get("answered")]
        first_seen: dict[str, float] = {}
        for x in sorted(lines, key=lambda x: x["arrived"]):
            first_seen.setdefault(x["document"], x["arrived"])
        after = {d for d, t in first_seen.items() if t > added.get("at", 0)}
        on_new = {x["document"] for x in lines if x["replica"] == "r3"}
        row = _summary(name, fleet, queued, time.perf_counter() - t0, "affinity, a 4th replica added at 40%")
        row.update(documents_begun_after=len(after), of_them_on_new_replica=len(after & on_new),
                   begun_before_moved_to_new=len(on_new - after))
        return row
    finally:
        for w in workers:
            w.stop()
        fleet.close()


def _print(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'run':38} {'repl':>4} {'docs':>5} {'fail':>4} {'docs/s':>7} {'read':>6} {'of shared':>9} "
          f"{'prefill Mtok':>12} {'repl/doc':>8} {'moved':>5}")
    for r in rows:
        read = r["cached_tokens"] / r["prompt_tokens"] if r["prompt_tokens"] else 0.0
        print(f"{r['run'][:38]:38} {r['replicas']:4d} {r['documents']:5d} {r['failed']:4d} {r['documents_per_s']:7.2f} "
              f"{read:6.1%} {(r['of_shared'] or 0):9.1%} {r['prefill_tokens'] / 1e6:12.3f} "
              f"{r['replicas_per_document']:8.2f} {r['documents_moved']:5d}")


@contextlib.contextmanager
def _own_redis(folder: Path) -> Iterator[str]:
    server = RedisServer(folder / "redis")
    try:
        yield server.url()
    finally:
        server.stop()


def bench_replicas(args: Any) -> None:
    rows: list[dict[str, Any]] = []

    def record(row: dict[str, Any]) -> dict[str, Any]:
        rows.append(row)
        print(json.dumps(row), flush=True)
        return row

    from tests.support import use_services

    # A Redis of its own: a bench cut short leaves its documents queued, and the next one's workers
    # on a shared database would situate them too (docs/benchmarks.md).
    with tempfile.TemporaryDirectory() as tmp, _own_redis(Path(tmp)) as url, use_services(redis_url=url):
        main, sweep = Path(tmp) / "main.jsonl", Path(tmp) / "sweep.jsonl"
        documents(main, args.documents)
        documents(sweep, args.sweep_documents)
        by = {routing: record(run(main, 4, routing, f"4 replicas, {routing}"))
              for routing in ("affinity", "round-robin", "least-loaded")}
        half = {routing: record(run(main, 4, routing, f"4 replicas, {routing}, 16 in flight", documents_each=8))
                for routing in ("affinity", "round-robin")}
        if not args.quick:
            for n in (1, 2, 8):
                for routing in (("affinity",) if n == 1 else ("affinity", "round-robin")):
                    record(run(sweep, n, routing, f"{n} replica{'s' if n > 1 else ''}, {routing}"))
        killed = record(run_killed(main))
        added = record(run_added(main))
    _print(rows)
    aff, rr, ll = by["affinity"], by["round-robin"], by["least-loaded"]
    print(f"\n4 replicas, {aff['documents']} documents: affinity reads {aff['of_shared']:.1%} of what one shared cache "
          f"could have served (target >= 95%); round robin {rr['of_shared']:.1%}, least-loaded {ll['of_shared']:.1%}")
    print(f"throughput, 32 documents in flight (the replicas' slots): affinity {aff['documents_per_s']:.2f} documents/s, "
          f"round robin {rr['documents_per_s']:.2f} ({aff['documents_per_s'] / rr['documents_per_s']:.2f}x; target >= 2.5x), "
          f"least-loaded {ll['documents_per_s']:.2f} ({aff['documents_per_s'] / ll['documents_per_s']:.2f}x)")
    h_aff, h_rr = half["affinity"], half["round-robin"]
    print(f"16 documents in flight: affinity {h_aff['documents_per_s']:.2f}, round robin {h_rr['documents_per_s']:.2f} "
          f"({h_aff['documents_per_s'] / h_rr['documents_per_s']:.2f}x); prefill computed "
          f"{h_rr['prefill_tokens'] / h_aff['prefill_tokens']:.2f}x affinity's (32 in flight: "
          f"{rr['prefill_tokens'] / aff['prefill_tokens']:.2f}x: round robin's caches evict each other's documents)")
    print(f"a replica killed: {killed['failed']} failed of {killed['documents']} (target 0), "
          f"{killed['documents_moved']} documents moved ({killed['documents_moved'] / killed['documents']:.1%}; "
          f"target <= 35%), {killed['answered_twice']} calls answered twice; {killed['computed_again']} computed on it and "
          f"again elsewhere, against {killed['in_flight_on_killed']} calls in flight on it when it died")
    print(f"a replica added: {added['failed']} failed, {added['documents_moved']} documents moved, "
          f"{added['of_them_on_new_replica']} of the {added['documents_begun_after']} documents begun after on the "
          f"new replica, {added['begun_before_moved_to_new']} begun before it went there")
