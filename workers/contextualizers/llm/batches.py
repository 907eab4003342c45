"""Message Batches mode (``situate ingest --batch``): half the price, results within hours,
batches grouped across documents.

Caching in a batch is best effort, so each document still goes in two steps: a *seed* — its
first chunk alone, whose document block is cached with the 1-hour TTL — then, once the seed's
batch has ended, its other chunks, which read that entry. What is grouped is the documents: a
document's step waits in a pool (``storage.batch_pool``), and one worker at a time, the tender,
cuts batches from the pool's head — when the pool holds a full batch (100,000 requests or 256 MB:
the API's limits) or its oldest step has waited ``SITUATE_BATCH_WAIT_S`` — and collects the
batches that have ended. So a thousand documents cost two batch creations, not two thousand.

The Batches API has limits of its own per account: requests per minute across its endpoints
(creations, polls and result fetches share them: a Redis bucket at ``SITUATE_BATCH_API_RPM`` paces
every worker's) and requests waiting in its processing queue (``SITUATE_BATCH_QUEUE_LIMIT``: a
batch waits in the pool rather than be refused). A 429 is waited out as every provider's is
(``workers.faults``), never a failed document.

When a batch ends, each of its documents is decided alone: its contexts are checkpointed as the
live path's are (usage recorded at the batch price); a document whose requests errored fails
with the reason, and only it; one whose requests expired (a batch not done within 24 hours) or
were canceled goes back to the pool for what it lacks — nothing paid is paid again; a seeded one
goes back for its other chunks; a complete one is handed to the index.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from workers import faults, keys, models
from workers.chunks.splitting import Chunk
from workers.contextualizers.base import SourceDocument
from workers.contextualizers.llm import usage
from workers.contextualizers.llm.providers import AnthropicProvider, Prompt
from workers.contextualizers.llm.scheduler import LLMContextualizer
from workers.errors import ProviderRefused
from workers.settings import get_settings
from workers.storage import batch_pool, buckets, checkpoints, states

log = logging.getLogger("situate.batches")

# A request's bytes in a batch beyond its texts: its JSON, model and parameters.
REQUEST_OVERHEAD_BYTES = 400
# The one bucket every worker's Batches API calls take from (creations, polls, result fetches).
API_BUCKET = "batches-api"
# Of the API's byte limit, what a batch's requests may fill: the rest is the request's own framing.
SIZE_MARGIN = 0.98
# A document's ``batch`` field, "<version>:group:<batch id or pool>": grouped, not 0.2's batch of one.
GROUPED = "group:"


def _long(ctx: LLMContextualizer, doc: SourceDocument) -> bool:
    return ctx.is_long(doc)  # the contextualizer's own rule: its model's window, not only the setting


def _request_bytes(prompt: Prompt) -> int:
    return len((prompt.cached or "").encode()) + len(prompt.instruction.encode()) + REQUEST_OVERHEAD_BYTES


def enqueue(ctx: LLMContextualizer, doc: SourceDocument, missing: list[Chunk]) -> None:
    """The document's next step into the pool: its seed (the first chunk alone) when nothing of
    it is situated yet and its document block can be cached, else all it lacks."""
    long_doc = _long(ctx, doc)
    first = ctx._prompt(doc, missing[0], long_doc)
    seed = first.cache and len(missing) > 1 and len(missing) == len(doc.chunks)
    todo = missing[:1] if seed else missing
    nbytes = sum(_request_bytes(ctx._prompt(doc, c, long_doc)) for c in todo)
    batch_pool.add(doc.collection, doc.doc_id, doc.version, [c.n for c in todo], seed, len(todo), nbytes)
    states.annotate(doc.collection, doc.doc_id, batch=f"{doc.version}:{GROUPED}pool")


def request(ctx: LLMContextualizer, doc: SourceDocument, chunk: Chunk, custom_id: str) -> dict[str, Any]:
    prompt = ctx._prompt(doc, chunk, _long(ctx, doc))
    return {"custom_id": custom_id,
            "params": {"model": ctx.config.model, "max_tokens": get_settings().llm_max_output_tokens,
                       **ctx.spec.request_extras,
                       "messages": [{"role": "user", "content": AnthropicProvider.content(prompt, "1h")}]}}


@dataclass
class Source:
    """What the tender needs of the pipeline, for a document: whether it is still waiting for its
    contexts at this version, its source and contextualizer, and what to do once decided."""

    pending: Callable[[str, str, str], bool]
    load: Callable[[str, str, str], tuple[LLMContextualizer, SourceDocument]]
    complete: Callable[[str, str, str, int], None]          # every chunk situated: on to the index
    fail: Callable[[str, str, str, str], None]              # the reason


@dataclass
class Outcome:
    created: int = 0
    collected: int = 0
    requests: int = 0
    notes: dict[str, int] = field(default_factory=dict)


class Tender:
    """One pass of the fleet's batch work (the caller holds the tender's lock)."""

    def __init__(self, source: Source, client: Any = None, keep: Callable[[], object] = lambda: None):
        """``keep``: called while the pass goes on (each API call and its waits, each page of the
        pool), to renew the tender's lock: a short lock a lost worker lets go of soon."""
        import anthropic

        self.source, self.keep = source, keep
        self.client = client or anthropic.Anthropic(max_retries=0, timeout=get_settings().llm_timeout_s)
        s = get_settings()
        # Ten seconds' worth at most at once: a tender that catches up must not spend a minute's.
        self.bucket = ([keys.rate_bucket(API_BUCKET, "requests")], [(max(2.0, s.batch_api_rpm / 6), s.batch_api_rpm / 60.0)])

    # -- the Batches API, paced and waited out ----------------------------------------------
    def _api(self, what: Callable[[], Any], requests: int = 1) -> Any:
        """``what``, after taking its ``requests`` from the account's Batches budget (each try: a
        try that met a 429 spent them too). A 429 also empties the budget for its wait, so that
        the next try waits for all its requests, not for the one the answer counted."""
        keys_, shapes = self.bucket

        def paced() -> Any:
            self.keep()
            while (wait := buckets.take(keys_, shapes, (requests,))) > 0:
                time.sleep(min(wait, 5.0))
                self.keep()
            return what()

        def penalize(fault: Any, wait: float) -> None:
            if fault.kind == "http_429":  # the answer's wait is for one request; the try needs them all
                buckets.empty_for(keys_[0], shapes[0], wait * requests)

        for attempt in faults.retrying(on_fault=lambda fault: faults.count("anthropic-batches", fault.kind),
                                       on_wait=penalize):
            with attempt:
                return paced()
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

    def tend(self) -> Outcome:
        outcome = Outcome()
        self._recover()
        for batch_id, info in batch_pool.open_batches().items():
            if time.time() - info.get("polled", 0) < get_settings().batch_poll_s:
                continue
            try:
                if self._collect(batch_id, info, outcome):
                    outcome.collected += 1
            except ProviderRefused as e:  # the API does not know it (deleted, past its retention)
                log.warning("batches: %s is gone (%s): its documents go back to the pool", batch_id, e)
                self._lost(batch_id)
        while self._flush(outcome):
            outcome.created += 1
        return outcome

    def _lost(self, batch_id: str) -> None:
        """A batch whose results will never come: each of its documents asked again for what it
        lacks (what was collected before is checkpointed: nothing is paid twice)."""
        for collection, doc_id, version in {(m[0], m[1], m[2]) for m in batch_pool.members(batch_id)}:
            self._decide(collection, doc_id, version, {"ok": [], "errored": [], "again": [], "seed": []})
        batch_pool.close(batch_id)

    # -- collecting ---------------------------------------------------------------------------
    def _collect(self, batch_id: str, info: dict[str, Any], outcome: Outcome) -> bool:
        batch = self._api(lambda: self.client.messages.batches.retrieve(batch_id))
        batch_pool.polled(batch_id, info)
        if batch.processing_status != "ended":
            return False
        members = batch_pool.members(batch_id)
        by_doc: dict[tuple[str, str, str], dict[str, list[Any]]] = {}
        for item in self._api(lambda: results(self.client, batch)):
            index = int(item["custom_id"][1:])
            collection, doc_id, version, n, seed = members[index]
            found = by_doc.setdefault((collection, doc_id, version), {"ok": [], "errored": [], "again": [], "seed": []})
            if seed:
                found["seed"].append(n)
            kind = item["result"]["type"]
            if kind == "succeeded":
                checkpoint(collection, doc_id, version, n, item["result"]["message"])
                found["ok"].append(n)
            elif kind == "errored":
                found["errored"].append(f"chunk {n}: {_error_text(item['result'])}")
            else:  # expired, canceled: asked again, not failed
                found["again"].append(n)
            outcome.notes[kind] = outcome.notes.get(kind, 0) + 1
        for (collection, doc_id, version), found in by_doc.items():
            checkpoints.flush(collection, doc_id, version)
            self._decide(collection, doc_id, version, found)
        batch_pool.close(batch_id)
        log.info(json.dumps({"event": "batch_collected", "batch": batch_id, "requests": info.get("requests"),
                             "documents": len(by_doc), **outcome.notes}))
        return True

    def _decide(self, collection: str, doc_id: str, version: str, found: dict[str, list[Any]]) -> None:
        if not self.source.pending(collection, doc_id, version):  # superseded, deleted, failed meanwhile
            batch_pool.released(collection, doc_id)
            return
        if found["errored"]:
            batch_pool.released(collection, doc_id)
            self.source.fail(collection, doc_id, version, "message batch: " + "; ".join(found["errored"][:5]))
            return
        ctx, doc = self.source.load(collection, doc_id, version)
        done = checkpoints.load_contexts(collection, doc_id, version)
        missing = [c for c in doc.chunks if c.n not in done]
        if not missing:
            batch_pool.released(collection, doc_id)
            # Its calls were billed as their results came; the document itself counts once, here,
            # so the bill's cost per million document tokens covers batches as the live path's.
            usage.record_batched_document(collection, doc_id, models.estimate_tokens(doc.text, ctx.spec))
            self.source.complete(collection, doc_id, version, len(doc.chunks))
            return
        enqueue(ctx, doc, missing)  # the rest after its seed; or what expired, asked again

    # -- creating -----------------------------------------------------------------------------
    def _flush(self, outcome: Outcome) -> bool:
        """One batch from the pool's head, if one is due and the API's queue has room."""
        s = get_settings()
        entries, requests, nbytes, oldest = batch_pool.size()
        if not entries:
            return False
        full = requests >= s.batch_max_requests or nbytes >= s.batch_max_bytes
        if not full and oldest is not None and time.time() - oldest < s.batch_wait_s:
            return False
        in_queue = sum(info.get("requests", 0) for info in batch_pool.open_batches().values())
        room = min(s.batch_max_requests, s.batch_queue_limit - in_queue)
        if room <= 0:
            outcome.notes["queue_full"] = outcome.notes.get("queue_full", 0) + 1
            return False
        taken, bodies, members = self._cut(room, int(s.batch_max_bytes * SIZE_MARGIN))
        if not members:
            batch_pool.drop_head(taken)
            return bool(taken)
        batch_pool.begin(len(taken), len(members))
        batch = self._api(lambda: self.client.messages.batches.create(requests=bodies))
        batch_pool.record(batch.id, members, taken)
        for collection, doc_id, version in {(m[0], m[1], m[2]) for m in members}:
            states.annotate(collection, doc_id, batch=f"{version}:{GROUPED}{batch.id}")
        outcome.requests += len(members)
        log.info(json.dumps({"event": "batch_created", "batch": batch.id, "requests": len(members),
                             "steps": len(taken)}))
        return True

    def _cut(self, max_requests: int, max_bytes: int) -> tuple[list[dict[str, Any]], list[Any], list[list[Any]]]:
        """The pool's head up to the limits: (entries consumed, requests, members). Entries whose
        document no longer waits at that version are consumed without a request."""
        taken: list[dict[str, Any]] = []
        bodies: list[Any] = []
        members: list[list[Any]] = []
        used = 0
        for entry in self._head():
            c, d, v = entry["c"], entry["d"], entry["v"]
            if not self.source.pending(c, d, v):
                taken.append(entry)
                batch_pool.released(c, d)
                continue
            ctx, doc = self.source.load(c, d, v)
            done = checkpoints.load_contexts(c, d, v)
            asked = set(entry["n"]) - set(done)
            wanted = [chunk for chunk in doc.chunks if chunk.n in asked]
            mine = [request(ctx, doc, chunk, f"r{len(members) + i}") for i, chunk in enumerate(wanted)]
            # The bytes as sent (JSON escapes a document's quotes and newlines: the pool's figure
            # is an estimate), so a batch never passes the API's size and meets a 413.
            nbytes = sum(len(json.dumps(body).encode()) + 2 for body in mine)
            if members and (len(members) + len(mine) > max_requests or used + nbytes > max_bytes):
                break
            if nbytes > max_bytes:
                # Alone it passes a batch's size: it fails, with the remedy, rather than block the pool.
                taken.append(entry)
                batch_pool.released(c, d)
                self.source.fail(c, d, v, f"message batch: this document's {len(mine)} requests take {nbytes:,} bytes, "
                                          "more than a batch holds: ingest it without --batch")
                continue
            taken.append(entry)
            bodies += mine
            members += [[c, d, v, chunk.n, bool(entry["seed"])] for chunk in wanted]
            used += nbytes
        return taken, bodies, members

    def _head(self, step: int = 200) -> Iterator[dict[str, Any]]:
        start = 0
        while True:
            self.keep()
            page = batch_pool.head(start + step)[start:]
            if not page:
                return
            yield from page
            start += len(page)

    def _recover(self) -> None:
        """A creation cut short between the API's answer and its record: the batch created then
        with as many requests is adopted (its entries leave the pool, as ``record`` does); if
        none was, the creation never happened and the pool is as it was."""
        pending = batch_pool.creating()
        if pending is None:
            return
        listed = self._api(lambda: list(self.client.messages.batches.list(limit=20)))
        for batch in listed:
            created = _timestamp(batch.created_at)
            total = sum(getattr(batch.request_counts, k) for k in ("processing", "succeeded", "errored",
                                                                   "canceled", "expired"))
            if created >= pending["at"] - 5 and total == pending["requests"] \
                    and batch.id not in batch_pool.open_batches():
                taken, _, members = self._cut(pending["requests"], get_settings().batch_max_bytes)
                if len(members) == pending["requests"]:
                    batch_pool.record(batch.id, members, taken)
                    log.warning("batches: adopted %s, created before a crash and never recorded", batch.id)
                    return
        batch_pool.abandon_creation()


def results(client: Any, batch: Any) -> list[dict[str, Any]]:
    """An ended batch's results, read from its ``results_url`` in one request (the SDK's own
    ``results()`` reads the batch again first: two requests of the account's budget)."""
    text = client.get(batch.results_url, cast_to=str, options={"headers": {"Accept": "application/binary"}})
    return [json.loads(line) for line in str(text).splitlines() if line.strip()]


def checkpoint(collection: str, doc_id: str, version: str, n: int, message: dict[str, Any]) -> None:
    """One result's context and usage, checkpointed as the live path's are (at the batch price)."""
    model = message["model"]
    u = message.get("usage") or {}
    answer_in, write, read, out = (u.get("input_tokens") or 0, u.get("cache_creation_input_tokens") or 0,
                                   u.get("cache_read_input_tokens") or 0, u.get("output_tokens") or 0)
    cost = models.cost_usd(models.get(model), answer_in, write, read, out, batch=True, ttl="1h")
    record = {"model": model, "input_tokens": answer_in, "cache_write_tokens": write, "cache_read_tokens": read,
              "output_tokens": out, "cost_usd": cost, "attempt": 1, "batch": True}
    usage.record_call(collection, None, doc_id, n, model, record, 0.0, cost, 1, batch=True)
    text = " ".join("".join(b.get("text", "") for b in message.get("content") or [] if b.get("type") == "text").split())
    if text:
        checkpoints.save_context(collection, doc_id, version, n,
                                 {"text": text[: get_settings().llm_max_context_chars], "usage": record})


def _timestamp(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    from datetime import datetime

    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _error_text(result: dict[str, Any]) -> str:
    error = result.get("error") or {}
    inner = error.get("error", error) if isinstance(error, dict) else error
    return str((inner or {}).get("message") if isinstance(inner, dict) else inner or "errored")[:300]


def collect_legacy(ctx: LLMContextualizer, doc: SourceDocument, batch_id: str) -> bool:
    """A batch of one document, as 0.2 made them (``custom_id`` ``chunk-N``), still polled by
    its ``poll_batch`` message after an upgrade: its results checkpointed; False while it runs.
    Errored chunks are left missing: the document's next step asks for them in a grouped batch."""
    client = ctx.provider.client  # type: ignore[attr-defined]  # batches exist for AnthropicProvider only
    batch = client.messages.batches.retrieve(batch_id)
    if batch.processing_status != "ended":
        return False
    for item in results(client, batch):
        if item["result"]["type"] == "succeeded":
            checkpoint(doc.collection, doc.doc_id, doc.version, int(item["custom_id"].split("-", 1)[1]),
                       item["result"]["message"])
    checkpoints.flush(doc.collection, doc.doc_id, doc.version)
    return True
