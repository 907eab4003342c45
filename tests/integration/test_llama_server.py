"""The ``openai`` contextualizer against two real llama.cpp servers (``llama-server``, built by
ops/setup from the source llama-cpp-python vendors) on this machine's CPU, serving the packaged
SmolLM2-135M: contexts written, every call of a document answered by one replica, and what the
servers say they read from their prefix caches, in the bill.

SmolLM2 writes poor text; the path is the point. Each replica runs a slot per document it may
hold at once (``-np 4``: the four documents may all land on one replica) and the workers send a
document's calls one at a time (``SITUATE_LLM_DOCUMENT_CONCURRENCY=1``): a busy llama.cpp slot
cannot lend its prefix to another slot, and a slot that takes turns between documents restores
their prompts from its cache in RAM only in part, so a document stays on the slot that holds it
(docs/your-own-models.md)."""

from __future__ import annotations

import json
import uuid
from collections import defaultdict

import pytest

from ops.harness import Worker
from ops.model_servers import LlamaServers, llama_server_binary
from tests.integration.test_llama import smollm2
from tests.support import redis_of_its_own, run_cli, write_jsonl
from workers.contextualizers.llm import replicas


@pytest.fixture(scope="module", autouse=True)
def private_redis(tmp_path_factory):
    with redis_of_its_own(tmp_path_factory, "llama-server-redis") as server:
        yield server


PLACES = ["Lisbon", "Tromso", "Valparaiso", "Hobart"]


def document(i: int) -> dict:
    """About 1,500 tokens of a harbour's story; four one-sentence chunks taken from it."""
    place = PLACES[i]
    sentences = [f"In year {1800 + 7 * k + i}, the harbour of {place} recorded {40 + k * 3 + i} ships, mostly "
                 f"carrying {['salt', 'timber', 'wool', 'copper', 'fish'][k % 5]} for the merchants of the "
                 f"{['north', 'south', 'east', 'west'][k % 4]} quarter, while the pilots of {place} kept a "
                 f"ledger of every tide that season." for k in range(42)]
    return {"id": f"harbour-{place.lower()}", "text": " ".join(sentences),
            "chunks": [sentences[k] for k in (3, 15, 27, 39)]}


def calls_by_document(logs: str) -> dict[str, list[dict]]:
    """The workers' usage lines (``situate.usage``), one per call, in the order they were made."""
    found: dict[str, list[dict]] = defaultdict(list)
    for raw in logs.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if line.get("logger") == "situate.usage" and line.get("event") == "llm_call":
            found[line["doc_id"]].append(line)
    return found


@pytest.mark.skipif(llama_server_binary() is None, reason="llama-server is built by ops/setup with the llama extra")
def test_two_llama_servers_write_contexts_each_document_on_one_that_reads_its_prefix(tmp_path):
    servers = LlamaServers(smollm2(), n=2, slots=4, context=4 * 4096, threads=1)
    env = {"SITUATE_OPENAI_BASE_URLS": servers.urls, "SITUATE_OPENAI_REPLICA_CONCURRENCY": "4",
           "SITUATE_LLM_DOCUMENT_CONCURRENCY": "1", "SITUATE_OPENAI_CONTEXT_TOKENS": "4096",
           "SITUATE_LLM_MAX_OUTPUT_TOKENS": "40", "SITUATE_LLM_TIMEOUT_S": "600"}
    worker = Worker(4, ["--pool", "threads"], env, name=f"llama-server-{uuid.uuid4().hex[:6]}")
    docs = [document(i) for i in range(4)]
    # Rendezvous over two servers on random ports puts all four documents on one an eighth of the
    # time: a collection name whose documents rank both first, so "both servers used" is a check.
    pool = replicas.parse(servers.urls)
    collection = next(name for name in (f"t-{uuid.uuid4().hex[:10]}" for _ in range(200))
                      if len({replicas.rank(f"{name}/{d['id']}", pool)[0] for d in docs}) == 2)
    try:
        result = run_cli("ingest", "-c", collection, "--contextualizer", "openai", "--model", "smollm2",
                         write_jsonl(tmp_path / "d.jsonl", docs), "--json", env=env, timeout=900)
        assert result.returncode == 0, result.stdout + result.stderr
        assert json.loads(result.stdout)["indexed"] == 4

        from producers.retrieval.search import search
        from workers.storage import catalog

        hits = search(catalog.load(collection), "harbour of Hobart ships", k=20)
        assert {h.doc_id for h in hits} >= {"harbour-hobart"} and all(h.context.strip() for h in hits)

        calls = calls_by_document(worker.log.read_text(errors="replace"))
        assert sorted(calls) == sorted(d["id"] for d in docs) and all(len(c) == 4 for c in calls.values())
        assert all(len({c["replica"] for c in cs}) == 1 for cs in calls.values()), "a document on two replicas"
        assert len({cs[0]["replica"] for cs in calls.values()}) == 2, "four documents, both servers used"
        # After each document's first call, what the servers say they read of its prompt tokens.
        later = [c for cs in calls.values() for c in cs[1:]]
        assert all(c["cache_read_tokens"] is not None for c in later), "llama-server reports its cache reads"
        read = sum(c["cache_read_tokens"] for c in later)
        prompt = sum(c["cache_read_tokens"] + c["input_tokens"] for c in later)
        print(f"\nllama-server: after each document's first call, {read:,} of {prompt:,} prompt tokens "
              f"({read / prompt:.1%}) read from the cache")
        assert read / prompt >= 0.9

        stats = run_cli("stats", "-c", collection, "--json")
        total = json.loads(stats.stdout)["collections"][collection]["total"]
        assert total["cache_reported"] is True and total["cache_read_tokens"] == sum(
            c["cache_read_tokens"] for cs in calls.values() for c in cs)
        assert total["calls"] == 16 and total["cost_usd"] == 0 and total["call_seconds"] > 0
    finally:
        worker.stop()
        servers.close()
        from workers import lifecycle
        from workers.storage import catalog

        if catalog.exists(collection):
            lifecycle.delete(collection)
