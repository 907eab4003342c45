"""Message Batches mode (``situate ingest --batch``): half the price, results within hours.

Caching in a batch is best effort, so each document goes in two steps: a *seed* batch with its
first chunk, whose document block is cached with a 1-hour TTL, then — once the seed has ended —
a batch with its other chunks, which read that entry. The situate task submits the seed and
returns; ``poll_batch`` tasks (Celery countdown, no worker blocked while waiting) collect
results into the same checkpoints the live path uses, then hand the document to the index
queue. Usage is recorded with ``batch=True``: the cost shows the discount.

One batch per document and step keeps the bookkeeping trivial; grouping many documents per
batch is the obvious next step for corpora of millions.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from workers import models
from workers.chunks.splitting import Chunk
from workers.contextualizers.base import SourceDocument
from workers.contextualizers.claude import usage
from workers.contextualizers.claude.providers import AnthropicProvider
from workers.contextualizers.claude.scheduler import LLMContextualizer
from workers.errors import LLMError
from workers.settings import get_settings
from workers.storage import checkpoints

log = logging.getLogger("situate.batches")


def _requests(ctx: LLMContextualizer, doc: SourceDocument, chunks: list[Chunk], long_doc: bool) -> list[dict[str, Any]]:
    s = get_settings()
    out = []
    for chunk in chunks:
        prompt = ctx._prompt(doc, chunk, long_doc)
        out.append({"custom_id": f"chunk-{chunk.n}",
                    "params": {"model": ctx.config.model, "max_tokens": s.llm_max_output_tokens, **ctx.spec.request_extras,
                               "messages": [{"role": "user", "content": AnthropicProvider.content(prompt, "1h")}]}})
    return out


def submit(ctx: LLMContextualizer, doc: SourceDocument, chunks: list[Chunk]) -> tuple[str, str]:
    """Submit the next step for ``chunks`` (the missing ones); returns (batch id, step)."""
    provider = ctx.provider
    assert isinstance(provider, AnthropicProvider), "batches exist for the Anthropic API only"
    long_doc = models.estimate_tokens(doc.text, ctx.spec) > get_settings().llm_max_document_tokens
    cacheable = ctx._prompt(doc, chunks[0], long_doc).cache
    step = "seed" if cacheable and len(chunks) > 1 else "all"
    todo = chunks[:1] if step == "seed" else chunks
    requests: Any = _requests(ctx, doc, todo, long_doc)  # plain dicts, as the SDK's TypedDicts describe
    batch = provider.client.messages.batches.create(requests=requests)
    log.info(json.dumps({"event": "batch_submitted", "collection": doc.collection, "doc_id": doc.doc_id,
                         "batch": batch.id, "step": step, "requests": len(todo)}))
    return batch.id, step


def collect(ctx: LLMContextualizer, doc: SourceDocument, batch_id: str) -> bool:
    """Checkpoint the results of an ended batch. False while it is still running."""
    client = ctx.provider.client  # type: ignore[attr-defined]  # batches exist for AnthropicProvider only
    batch = client.messages.batches.retrieve(batch_id)
    if batch.processing_status != "ended":
        return False
    errors = []
    for item in client.messages.batches.results(batch_id):
        n = int(item.custom_id.split("-", 1)[1])
        if item.result.type != "succeeded":
            errors.append(f"chunk {n}: {item.result.type}")
            continue
        message = item.result.message
        u = message.usage
        answer_in, write, read, out = (u.input_tokens or 0, u.cache_creation_input_tokens or 0,
                                       u.cache_read_input_tokens or 0, u.output_tokens or 0)
        cost = models.cost_usd(ctx.spec, answer_in, write, read, out, batch=True, ttl="1h")
        record = {"model": ctx.config.model, "input_tokens": answer_in, "cache_write_tokens": write,
                  "cache_read_tokens": read, "output_tokens": out, "cost_usd": cost, "attempt": 1, "batch": True}
        usage.record_call(doc.collection, doc.run, doc.doc_id, n, ctx.config.model, record, 0.0, cost, 1, batch=True)
        text = " ".join("".join(b.text for b in message.content if b.type == "text").split())
        if not text:
            errors.append(f"chunk {n}: the model returned an empty context")
            continue
        checkpoints.save_context(doc.collection, doc.doc_id, doc.version, n,
                                 {"text": text[: get_settings().llm_max_context_chars], "usage": record})
    if errors:
        raise LLMError("batch " + batch_id + ": " + "; ".join(errors[:5]))
    return True
