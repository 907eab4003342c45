"""The bill: one JSON line per LLM call, one per document, and running totals in Redis.

Every call is logged on the ``situate.usage`` logger (document, chunk, model, input, cache
write, cache read and output tokens, latency, cost, attempt) — grep-able, and never carrying a
prompt or a key. Totals per collection and per run are kept in Redis hashes so ``situate
stats`` can print the cache-read ratio next to the best ratio the same calls could have had,
the cost per run and per million document tokens, and the 429/529 counts.

The totals are kept by ``storage.bill``; this module says what goes in them and what they mean.

"Best possible" cache reads for a document of n calls whose cacheable prefix is P tokens is
(n - 1) x P: the first call must write the prefix, every other call could read it. Documents
below the model's cache minimum can read nothing.

Servers of your own (``openai``) write nothing: every read is the prefix the server kept, and the
figures per replica say which one read what. A server that says nothing of its cache (Ollama,
vLLM without ``--enable-prompt-tokens-details``) has its calls counted as *not reported*: a total
of reads then covers the calls that reported, and reads nothing when none did (``None``, not 0).
The time spent in calls is kept too: for a self-hosted model, tokens and time are the bill.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from workers import metrics
from workers.storage import bill

log = logging.getLogger("situate.usage")

COUNTERS = ("calls", "input_tokens", "cache_write_tokens", "cache_read_tokens", "output_tokens",
            "best_read_tokens", "documents", "document_tokens", "http_429", "http_529", "http_5xx",
            "errors", "batch_calls", "cache_unreported_calls")


def record_call(collection: str, run: str | None, doc_id: str, chunk: int, model: str, usage: dict[str, Any],
                latency_s: float, cost: float, attempt: int, batch: bool = False,
                first_token_s: float | None = None, text_chars: tuple[int, int] | None = None) -> None:
    """``text_chars``: the characters of the document block and of the rest of the prompt,
    paired with the provider's counts they teach ``ingest --estimate`` the model's tokenizer:
    the block from a cache write, the rest from the uncached input beside a cache hit."""
    reported = usage.get("cache_reported", True)
    replica = usage.get("replica", "")
    line = {"event": "llm_call", "collection": collection, "doc_id": doc_id, "chunk": chunk, "model": model,
            "input_tokens": usage.get("input_tokens", 0), "cache_write_tokens": usage.get("cache_write_tokens", 0),
            "cache_read_tokens": usage.get("cache_read_tokens", 0) if reported else None,
            "output_tokens": usage.get("output_tokens", 0),
            "latency_ms": round(latency_s * 1000), "cost_usd": round(cost, 8), "attempt": attempt, "batch": batch}
    if replica:
        line["replica"] = replica
    log.info(json.dumps(line))
    m = metrics.Batch()  # the same figures, by model and over time, for /metrics and /dashboard
    m.count("llm_calls", 1, collection=collection, model=model)
    for kind in ("input", "cache_write", "cache_read", "output"):
        m.count("llm_tokens", line[f"{kind}_tokens"] or 0, collection=collection, model=model, kind=kind)
    if not reported:
        m.count("llm_cache_unreported_calls", 1, collection=collection, model=model)
    if replica:  # servers of your own: what each replica read of what it was sent, and its time
        m.count("llm_replica_calls", 1, replica=replica)
        m.count("llm_replica_tokens", line["input_tokens"], replica=replica, kind="input")
        if reported:
            m.count("llm_replica_tokens", line["cache_read_tokens"] or 0, replica=replica, kind="cache_read")
        m.count("llm_replica_seconds", latency_s, replica=replica)
    m.count("llm_cost_usd", float(cost), collection=collection, model=model)
    if text_chars and line["cache_write_tokens"]:
        m.count("llm_block_chars", text_chars[0], collection=collection, model=model)
        m.count("llm_block_tokens", line["cache_write_tokens"], collection=collection, model=model)
    if text_chars and (line["cache_write_tokens"] or line["cache_read_tokens"]):
        m.count("llm_rest_chars", text_chars[1], collection=collection, model=model)
        m.count("llm_rest_tokens", line["input_tokens"], collection=collection, model=model)
    if not batch:  # a batch answer's latency is the batch's, not a call's
        m.observe("llm_call_seconds", latency_s, model=model)
    if first_token_s is not None:
        m.observe("llm_first_token_seconds", first_token_s, model=model)
    bill.add(collection, run, {"calls": 1, "input_tokens": line["input_tokens"],
                               "cache_write_tokens": line["cache_write_tokens"],
                               "cache_read_tokens": line["cache_read_tokens"] or 0, "output_tokens": line["output_tokens"],
                               "cost_usd": float(cost), "batch_calls": int(batch),
                               "cache_unreported_calls": int(not reported), "call_seconds": 0.0 if batch else latency_s},
             counts=m)


def record_fault(collection: str, run: str | None, kind: str, model: str = "") -> None:
    """kind: a ``faults`` kind (connection, timeout, http_408, http_429, http_529, http_5xx), or
    errors. The bill keeps three columns — 429, 529, and the rest with the 5xx — and ``/metrics``
    every kind."""
    m = metrics.Batch()
    m.count("llm_faults", 1, collection=collection, model=model, kind=kind)
    bill.add(collection, run, {kind if kind in ("http_429", "http_529", "errors") else "http_5xx": 1}, counts=m)


def record_document(collection: str, run: str | None, doc_id: str, model: str, calls: list[dict[str, Any]],
                    document_tokens: int, best_read: int, already_cached: bool = False) -> dict[str, Any]:
    """Summarise one document's calls (or, with ``already_cached``, one slice of a big document
    after its warm-up call), with the cache reads they could have had at best; returns the summary."""
    total_in = sum(c["input_tokens"] + c["cache_write_tokens"] + c["cache_read_tokens"] for c in calls)
    read = sum(c["cache_read_tokens"] for c in calls)
    best = best_read
    summary = {"event": "document", "collection": collection, "doc_id": doc_id, "model": model,
               "calls": len(calls), "document_tokens": document_tokens,
               "cache_read_ratio": round(read / total_in, 4) if total_in else 0.0,
               "best_read_ratio": round(best / total_in, 4) if total_in else 0.0,
               "cost_usd": round(sum(c.get("cost_usd", 0.0) for c in calls), 8)}
    log.info(json.dumps(summary))
    m = metrics.Batch()
    m.count("llm_best_read_tokens", best, collection=collection, model=model)
    if already_cached:
        bill.add(collection, run, {"best_read_tokens": best}, counts=m)
    else:
        bill.add(collection, run, {"documents": 1, "document_tokens": document_tokens, "best_read_tokens": best},
                 counts=m)
    return summary


def record_best_reads(collection: str, run: str | None, model: str, best_read: int) -> None:
    """The best possible cache reads of the calls of a document that failed part-way."""
    m = metrics.Batch()
    m.count("llm_best_read_tokens", best_read, collection=collection, model=model)
    bill.add(collection, run, {"best_read_tokens": best_read}, counts=m)


def record_batched_document(collection: str, doc_id: str, document_tokens: int) -> None:
    """A document whose contexts all came from Message Batches (their calls recorded one by one)."""
    log.info(json.dumps({"event": "document", "collection": collection, "doc_id": doc_id, "batch": True,
                         "document_tokens": document_tokens}))
    bill.add(collection, None, {"documents": 1, "document_tokens": document_tokens})


def totals(collection: str | None = None, run: str | None = None) -> dict[str, Any]:
    raw = bill.counts(collection, run)
    out: dict[str, Any] = {name: int(float(raw.get(name, 0))) for name in COUNTERS}
    out["cost_usd"] = float(raw.get("cost_usd", 0.0))
    out["call_seconds"] = round(float(raw.get("call_seconds", 0.0)), 3)
    total_in = out["input_tokens"] + out["cache_write_tokens"] + out["cache_read_tokens"]
    out["cache_read_ratio"] = out["cache_read_tokens"] / total_in if total_in else 0.0
    out["best_read_ratio"] = min(1.0, out["best_read_tokens"] / total_in) if total_in else 0.0
    out["of_best"] = out["cache_read_ratio"] / out["best_read_ratio"] if out["best_read_ratio"] else None
    out["cache_reported"] = not (out["calls"] and out["cache_unreported_calls"] >= out["calls"])
    if not out["cache_reported"]:  # no call said what it read: unknown, not nothing
        out["cache_read_tokens"] = out["cache_read_ratio"] = out["of_best"] = None
    out["cost_per_million_document_tokens"] = (out["cost_usd"] / out["document_tokens"] * 1e6
                                               if out["document_tokens"] else None)
    return out


def replicas() -> dict[str, dict[str, Any]]:
    """Per replica of the servers of your own: calls, the share of its prompt tokens it read from
    its cache (None where it never said), the time in its calls, calls in flight now, documents
    moved away from it, and whether it is down."""
    from workers.storage import replicas as replica_state

    live = replica_state.snapshot()
    counters = metrics.read_counters()
    seen: dict[str, dict[str, float]] = {}
    for name in ("llm_replica_calls", "llm_replica_tokens", "llm_replica_seconds"):
        for labels, value in counters.get(name, []):
            field = labels.get("kind", name.removeprefix("llm_replica_"))
            seen.setdefault(labels["replica"], {})[field] = seen.get(labels["replica"], {}).get(field, 0) + value
    out: dict[str, dict[str, Any]] = {}
    for label in sorted(live):  # listed by a worker lately: one of the fleet as it is
        r, now = seen.get(label, {}), live.get(label, {})
        read, fresh = r.get("cache_read"), r.get("input", 0)
        out[label] = {"calls": int(r.get("calls", 0)), "input_tokens": int(fresh),
                      "cache_read_tokens": None if read is None else int(read),
                      "cache_read_ratio": None if read is None or not read + fresh else read / (read + fresh),
                      "call_seconds": round(r.get("seconds", 0.0), 3), "in_flight": now.get("in_flight", 0),
                      "moved_away": now.get("moved_away", 0), "down": now.get("down_until") is not None}
    return out


def repriced(collection: str, from_model: str, to_model: str, chunks: int) -> float | None:
    """What situating ``chunks`` chunks again with ``to_model`` would cost, from this
    collection's own bill: its mean call (tokens in, written, read, out), the text re-counted by
    the new model's tokenizer, priced at its rates. None before any call. A quick figure for the
    fleet views; ``situate reindex --estimate`` plans every prompt."""
    from workers import models

    t = totals(collection)
    if not t["calls"] or not chunks:
        return None
    old, new = models.get(from_model), models.get(to_model)
    scale = old.chars_per_token / new.chars_per_token  # the same text, in the new model's tokens
    written, read, plain = (round(t[k] / t["calls"] * scale) for k in
                            ("cache_write_tokens", "cache_read_tokens", "input_tokens"))
    return round(chunks * models.cost_usd(new, plain, written, read, round(t["output_tokens"] / t["calls"])), 4)
