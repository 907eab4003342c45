"""LLM contextualizers through the real SDKs (anthropic, boto3) against the stand-in API, with
real workers: cache-aware scheduling, checkpoints, faults, the bill."""

from __future__ import annotations

import json
import time

import pytest

from producers.retrieval.search import search
from tests.integration.conftest import worker_logs
from tests.support import SECRET_KEY, TEST_MODEL, run_cli, write_jsonl
from workers.contextualizers.llm import usage
from workers.storage import catalog, chunk_index, states

BIG = 400  # words per chunk: 4+ such chunks exceed the 2,048-token cache minimum


def paragraph(i: int, words: int = 120) -> str:
    return f"Section {i}. " + " ".join(f"term{i}x{j}" for j in range(words)) + ".\n\n"


def chunked_doc(doc_id: str, n: int, words: int = 120, marker: dict[int, str] | None = None) -> dict:
    chunks = [paragraph(i, words) + (marker or {}).get(i, "") for i in range(n)]
    return {"id": doc_id, "text": "".join(chunks), "chunks": chunks}


def ingest(collection, path, provider="anthropic", *extra):
    return run_cli("ingest", "-c", collection, "--contextualizer", provider, "--model", TEST_MODEL,
                   path, "--json", *extra)


def test_warm_first_then_fan_out_reads_every_other_call_from_cache(worker, standin, collection_name, tmp_path):
    standin.configure()
    # 6 chunks of ~250 tokens: a ~1,500-word document, above the model's 2,048-token minimum.
    doc = chunked_doc("big", 6, words=BIG)
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", [doc]))
    assert result.returncode == 0, result.stdout + result.stderr

    s = standin.stats()
    assert s["requests"] == 6 and s["breakpoints"] == 6
    assert s["cache_write_tokens"] > 2048, "the document should have been written exactly once"
    assert s["cache_read_tokens"] == 5 * s["cache_write_tokens"]

    t = usage.totals(collection_name)
    assert t["calls"] == 6 and t["documents"] == 1
    assert t["cache_read_ratio"] == pytest.approx(t["best_read_ratio"]) and t["cache_read_ratio"] > 0.5
    assert t["cost_usd"] > 0

    hits = search(catalog.load(collection_name), "term3x7")
    assert hits[0].chunk == 3 and hits[0].context.startswith("This chunk is from the document")

    again = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", [doc]))
    assert json.loads(again.stdout)["unchanged"] == 1
    assert standin.stats()["requests"] == 6, "re-ingesting unchanged content must make no call"


def test_a_thousand_token_document_is_cached_at_the_default_models_minimum(worker, standin, collection_name, tmp_path):
    """Claude Haiku 5.5 caches from 512 tokens before the breakpoint (seeds/000); a table that
    said 2,048 set no breakpoint on a ~1,000-token document, which then paid full price for every
    chunk. The stand-in holds the provider's minimum, not ours."""
    standin.configure()
    words = ("the sea otter floats on its back in the kelp and cracks shellfish on a stone it keeps "
             "in a pocket of loose skin under its forearm while the tide turns").split()
    chunks = [" ".join(words[(i * 7 + j) % len(words)] for j in range(170)) + ".\n\n" for i in range(5)]
    doc = {"id": "thousand", "text": "".join(chunks), "chunks": chunks}
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", [doc]))
    assert result.returncode == 0, result.stdout + result.stderr
    s = standin.stats()
    assert s["requests"] == 5 and s["breakpoints"] == 5
    assert 512 < s["cache_write_tokens"] < 2048, s
    assert s["cache_read_tokens"] == 4 * s["cache_write_tokens"]


def test_documents_below_the_cache_minimum_pay_no_breakpoint(worker, standin, collection_name, tmp_path):
    standin.configure()
    docs = [chunked_doc("short", 3, words=40), chunked_doc("single", 1, words=40)]
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", docs))
    assert result.returncode == 0, result.stdout + result.stderr
    s = standin.stats()
    assert s["requests"] == 4 and s["breakpoints"] == 0
    assert s["cache_write_tokens"] == 0 and s["cache_read_tokens"] == 0


def test_failed_chunk_fails_the_document_and_a_retry_pays_only_what_is_missing(worker, standin, collection_name, tmp_path):
    standin.configure(fail_marker="QUOKKA-REFUSE")
    doc = chunked_doc("flaky", 5, words=BIG, marker={3: "QUOKKA-REFUSE"})
    path = write_jsonl(tmp_path / "d.jsonl", [doc])
    result = ingest(collection_name, path)
    assert result.returncode == 1
    failure = json.loads(result.stdout)["failed"][0]
    assert failure["doc_id"] == "flaky" and "refused" in failure["error"]

    assert states.get(collection_name, "flaky")["state"] == "failed"
    assert chunk_index.count(catalog.load(collection_name), "flaky") == 0, "never indexed half situated"
    paid = standin.stats()["requests"]
    assert paid == 4  # the four other chunks were situated, and checkpointed
    # Their calls are billed with their cache reads, and with the reads they could have had at best
    # (without these, the share of the best passed 100%).
    t = usage.totals(collection_name)
    assert t["calls"] == 4 and 0 < t["cache_read_tokens"] <= t["best_read_tokens"], t

    listed = json.loads(run_cli("failed", "-c", collection_name, "--json").stdout)
    assert [d["doc_id"] for d in listed] == ["flaky"] and "refused" in listed[0]["error"]

    standin.configure()  # the provider accepts the chunk now
    result = run_cli("retry", "-c", collection_name, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout) == [{"doc_id": "flaky", "retry": "queued", "state": "indexed", "error": None}]
    assert standin.stats()["requests"] == 1, "only the missing chunk may be paid for again"
    assert states.get(collection_name, "flaky")["chunks"] == 5
    again = ingest(collection_name, path)  # and the same content again: unchanged, free
    assert json.loads(again.stdout)["unchanged"] == 1 and standin.stats()["requests"] == 1


def test_empty_answer_is_an_error_not_an_empty_context(worker, standin, collection_name, tmp_path):
    standin.configure(empty_marker="SAY-NOTHING")
    doc = chunked_doc("mute", 2, words=30, marker={1: "SAY-NOTHING"})
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", [doc]))
    assert result.returncode == 1
    assert "empty context" in json.loads(result.stdout)["failed"][0]["error"]


def test_429_and_529_are_retried_counted_and_lose_nothing(worker, standin, collection_name, tmp_path):
    # The stand-in's account limit is far below what the worker believes it has: it must
    # answer 429 with retry-after, and the worker must honour it. Plus random 529s.
    # One request per second, no burst: the fan-out after the warm-up call must meet 429s.
    # With the stand-in's seed, the 2nd and 4th requests it sees are 529s.
    standin.configure(limits={TEST_MODEL: {"rpm": 60, "itpm": 10**8, "otpm": 10**8}}, burst_s=1.0, p_529=0.2)
    docs = [chunked_doc("d0", 6, words=BIG)]
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", docs))
    assert result.returncode == 0, result.stdout + result.stderr

    s = standin.stats()
    t = usage.totals(collection_name)
    assert s["http_429"] > 0 and s["http_529"] > 0
    assert t["http_429"] == s["http_429"] and t["http_529"] == s["http_529"]
    assert t["calls"] == 6 == s["ok"]
    assert states.get(collection_name, "d0")["chunks"] == 6


def test_bedrock_converse_with_a_cache_point(worker, standin, collection_name, tmp_path):
    standin.configure()
    doc = chunked_doc("bed", 6, words=BIG)
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", [doc]), "bedrock")
    assert result.returncode == 0, result.stdout + result.stderr
    s = standin.stats()
    assert s["requests"] == 6 and s["breakpoints"] == 6
    assert s["cache_read_tokens"] == 5 * s["cache_write_tokens"] > 0

    t = usage.totals(collection_name)
    assert t["cache_read_tokens"] == s["cache_read_tokens"] and t["calls"] == 6


def test_stats_command_and_no_secret_in_logs(worker, standin, collection_name, tmp_path):
    standin.configure()
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", [chunked_doc("s", 3, words=BIG)]))
    assert result.returncode == 0
    stats = json.loads(run_cli("stats", "-c", collection_name, "--json").stdout)
    total = stats["collections"][collection_name]["total"]
    assert total["calls"] == 3 and total["cache_read_ratio"] == pytest.approx(total["best_read_ratio"])
    assert len(stats["collections"][collection_name]["runs"]) == 1
    logs = worker_logs()
    assert '"event": "llm_call"' in logs and '"event": "document"' in logs
    assert SECRET_KEY not in logs


def test_message_batches_seed_then_rest_at_half_price(worker, standin, collection_name, tmp_path):
    standin.configure(batch_delay_s=0.2)
    doc = chunked_doc("batched", 6, words=BIG)
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", [doc]), "anthropic", "--batch")
    assert result.returncode == 0, result.stdout + result.stderr
    s = standin.stats()
    assert s["batch_requests"] == 6
    assert s["batch_creations"] == 2, "the seed, then the other five chunks: two batches"
    assert s["cache_write_tokens"] > 0 and s["cache_read_tokens"] == 5 * s["cache_write_tokens"]

    from workers import models

    t = usage.totals(collection_name)
    assert t["batch_calls"] == 6 == t["calls"]
    spec = models.get(TEST_MODEL)
    full_price = models.cost_usd(spec, t["input_tokens"], t["cache_write_tokens"], t["cache_read_tokens"],
                                 t["output_tokens"], ttl="1h")
    assert t["cost_usd"] == pytest.approx(full_price / 2, rel=1e-6)
    assert states.get(collection_name, "batched")["chunks"] == 6
    # The document counts in the bill once, as the live path's do: a cost per document token.
    assert t["documents"] == 1 and t["document_tokens"] > 0 and t["cost_per_million_document_tokens"]


def test_message_batches_group_documents_within_the_apis_limits(worker, standin, collection_name, tmp_path):
    """Twenty documents: their seeds in one batch, their other chunks in another — not forty
    batches — though the stand-in allows the Batches API twenty requests a minute (creations, polls
    and result fetches together; the workers believe the first tier's fifty) and refuses what
    passes them with 429s, which are waited out."""
    standin.configure(batch_delay_s=0.2, batch_rpm=20, batch_burst_s=3)  # no two requests within three seconds
    docs = [chunked_doc(f"grouped-{i}", 4, words=BIG, marker={0: f"Report number {i}."}) for i in range(20)]
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", docs), "anthropic", "--batch")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["failed"] == []
    s = standin.stats()
    assert s["batch_requests"] == 80 and s["batch_api_429"] > 0, s
    assert s["batch_creations"] <= 4, s["batch_creations"]  # seeds, rests; a slow chunk stage may split one
    assert s["cache_read_tokens"] == 3 * s["cache_write_tokens"] > 0, "every seed's entry read by its document's rest"
    assert all(states.get(collection_name, d["id"])["state"] == "indexed" for d in docs)


def test_a_batch_that_partly_fails_fails_only_its_documents_and_expired_requests_go_back(worker, standin,
                                                                                        collection_name, tmp_path):
    standin.configure(batch_delay_s=0.2, fail_marker="QUOKKA-REFUSE", batch_expire_marker="WOMBAT-LATE")
    docs = [chunked_doc("fine", 3, words=BIG), chunked_doc("refused", 3, words=BIG, marker={2: "QUOKKA-REFUSE"}),
            chunked_doc("late", 3, words=BIG, marker={1: "WOMBAT-LATE"})]
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", docs), "anthropic", "--batch")
    assert result.returncode == 1, result.stdout + result.stderr  # one document failed
    assert states.get(collection_name, "fine")["state"] == "indexed"
    assert states.get(collection_name, "late")["state"] == "indexed", "an expired request is asked again"
    refused = states.get(collection_name, "refused")
    assert refused["state"] == "failed" and "chunk 2" in refused["error"] and "refused" in refused["error"]
    assert standin.stats()["paid_twice"] == 0


def test_big_document_is_sliced_across_workers_and_still_read_from_cache(worker, standin, collection_name, tmp_path):
    # More chunks than one worker's per-document bound (16): warm-up here, slices anywhere.
    standin.configure()
    doc = chunked_doc("huge", 40, words=120)
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", [doc]))
    assert result.returncode == 0, result.stdout + result.stderr
    s = standin.stats()
    assert s["requests"] == 40 and s["cache_write_tokens"] > 0
    assert s["cache_read_tokens"] == 39 * s["cache_write_tokens"], "one write, every other call a read"

    t = usage.totals(collection_name)
    assert t["documents"] == 1 and t["calls"] == 40
    assert t["cache_read_ratio"] == pytest.approx(t["best_read_ratio"])
    assert states.get(collection_name, "huge")["chunks"] == 40
    assert "situate.contextualize_slice" in worker_logs()


def test_a_lone_call_on_a_cold_document_reserves_its_cache_write(standin, collection_name, monkeypatch):
    """A big document's first call runs alone (its slices fan out after it): it writes the
    cache, so the shared limiter must hold the whole document for it, not a read's share.
    Reserved as a read, it overdrew the bucket by the document and 429s followed."""
    from workers import lifecycle
    from workers.chunks.splitting import locate
    from workers.contextualizers.base import SourceDocument
    from workers.contextualizers.llm import scheduler

    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", standin.url)
    standin.configure()
    doc = chunked_doc("cold", 6, words=BIG)
    chunks = locate(doc["text"], list(enumerate(doc["chunks"])))
    config = lifecycle.ensure(collection_name, contextualizer="anthropic", model=TEST_MODEL)
    contextualizer = scheduler.anthropic_contextualizer(config)
    reserved: list[int] = []
    acquire = contextualizer.limiter.acquire
    monkeypatch.setattr(contextualizer.limiter, "acquire",
                        lambda tokens, *a, **k: reserved.append(tokens) or acquire(tokens, *a, **k))
    source = SourceDocument(collection_name, "cold", "v1", doc["text"], "english", {}, chunks)

    list(contextualizer.contextualize(source, chunks[:1]))  # alone, cold
    written = standin.stats()["cache_write_tokens"]
    assert written > 2048 and reserved[0] >= written

    source.warm = True  # the slices that follow read it
    list(contextualizer.contextualize(source, chunks[1:3]))
    s = standin.stats()
    assert s["cache_read_tokens"] == 2 * written
    assert all(r < reserved[0] / 3 for r in reserved[1:]), reserved  # one chunk of six, no document


def test_a_due_tend_stands_until_it_runs_and_only_a_lost_one_is_replaced():
    """One tend at a time is scheduled: a contextualize that finds the pool full must not send
    another while one is due and waiting for the tender's lock (thousands were sent before)."""
    from workers import keys
    from workers.connections import redis_client
    from workers.storage import batch_pool

    batch_pool.scheduled_done()
    now = time.time()
    assert batch_pool.schedule(now, lost_after_s=30)
    time.sleep(0.01)
    assert not batch_pool.schedule(time.time(), lost_after_s=30), "due, not yet begun: it stands"
    assert not batch_pool.schedule(time.time() + 5, lost_after_s=30)
    redis_client().set(keys.BATCH_SCHEDULED, f"{now - 60:.3f}")  # its message lost a minute ago
    assert batch_pool.schedule(time.time(), lost_after_s=30)
    assert batch_pool.schedule(time.time() + 5, lost_after_s=30, force=True), "the tender's successor"
    batch_pool.scheduled_done()


def test_a_document_larger_than_a_batch_fails_alone_with_the_remedy(worker, standin, collection_name, tmp_path):
    """The workers' batches hold 2 MB here: a document whose other chunks take more fails with the
    reason, measured as the bytes sent (JSON escapes: the pool's own figure is an estimate), and
    the pool goes on with the next document — no 413 from the API, no pool stuck behind it."""
    standin.configure(batch_delay_s=0.2, batch_max_bytes=2_000_000)
    big, small = chunked_doc("too-big", 60, words=BIG), chunked_doc("fits", 4, words=BIG)
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", [big, small]), "anthropic", "--batch")
    failed = json.loads(result.stdout)["failed"]
    assert [f["doc_id"] for f in failed] == ["too-big"], result.stdout
    assert "more than a batch holds" in failed[0]["error"] and "without --batch" in failed[0]["error"]
    assert states.get(collection_name, "fits")["state"] == "indexed"
    assert standin.stats()["batch_refused_size"] == 0


GLOSSARY = "".join(f"term{i}x: the filing's word for measure number {i}, as the controller defines it.\n" for i in range(60))


@pytest.mark.parametrize("provider", ["anthropic", "bedrock"])
def test_a_glossary_goes_before_every_document_cached_across_them(worker, standin, collection_name, tmp_path, provider):
    """A collection's glossary is a block of its own before the document, with a breakpoint (a
    cachePoint on Bedrock): written once for the collection, read by every call after, its tokens
    in the bill; cache reads at least 99% of the best the same calls could have had."""
    standin.configure()
    glossary = tmp_path / "glossary.txt"
    glossary.write_text(GLOSSARY)
    docs = [chunked_doc(f"g{i}", 4, words=BIG) for i in range(3)]
    result = ingest(collection_name, write_jsonl(tmp_path / "d.jsonl", docs), provider, "--glossary-file", str(glossary))
    assert result.returncode == 0, result.stdout + result.stderr
    s = standin.stats()
    assert s["requests"] == 12
    assert len(s["first_blocks"]) == 1 and next(iter(s["first_blocks"].values())) == 12, "the glossary first, always"
    assert s["blocks_per_request"] == {"3": 12}  # glossary, document, instruction
    assert catalog.load(collection_name).glossary == GLOSSARY
    t = usage.totals(collection_name)
    assert t["of_best"] >= 0.99, t
    glossary_tokens = len(GLOSSARY.split()) * 2  # the stand-in counts words and punctuation
    assert t["cache_read_tokens"] >= 11 * glossary_tokens  # every call after the first read it


def test_a_changed_glossary_situates_again_an_unchanged_one_reuses():
    from workers.contextualizers import reuse
    from workers.storage.catalog import CollectionConfig

    live = CollectionConfig(name="c", contextualizer="anthropic", model=TEST_MODEL, glossary="EBITDA: earnings")
    assert reuse.reusable(live, live.model_copy())
    assert not reuse.reusable(live, live.model_copy(update={"glossary": "EBITDA: earnings before interest"}))
    assert not reuse.reusable(live, live.model_copy(update={"glossary": None}))
