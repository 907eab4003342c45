"""``situate ingest --estimate``: the bill before the run, from the planner the workers use.

Each document is chunked as the chunk stage would (same chunker, same settings) and each
chunk's prompt built by the same ``LLMContextualizer._prompt`` the workers call: the same
cached block, the same long-document window, the same decision whether a breakpoint is
worth setting. No provider is reached. Then, per document, what the routing gets at best and
in practice (one queue per document, the first call warming the cache before the others fan
out): one cache write of the block, a read of it by every other call; no breakpoint, or a
block under the model's minimum, plain input. Characters per token and output per call are
what past calls to the model measured (``metrics``): the collection's own when it has some
(adding documents to it), else the deployment's; else the model table's figure and a default:
the first estimate is a guess, the next ones are calibrated.

A file to extract (a PDF) is extracted as a worker would, in a sandboxed child process under the
same limits: the estimate must see its pages and sections to plan its windows. A long document's
prompts share two cached blocks, its opening and the window a chunk is in: the estimate counts a
write for each block the first time a call needs it, and a read after.

The time is what the rate limits allow at best (calls, uncached input + writes, output per
minute: reads do not count), not what the workers' number allows: add workers until it binds.
Tokens are estimated from characters (``models.estimate_tokens``); the provider's count may
differ by a few percent either way. Compare with ``situate stats`` after the run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from workers import models
from workers.chunks import recipe
from workers.chunks.splitting import Chunk
from workers.contextualizers import registry
from workers.contextualizers.base import SourceDocument
from workers.documents.validation import Original, valid
from workers.errors import BadDocument, ExtractionError
from workers.extraction import sandbox
from workers.extraction.document import Extracted
from workers.extraction.limits import Limits
from workers.settings import get_settings
from workers.storage.catalog import CollectionConfig

DEFAULT_OUTPUT_TOKENS = 70  # a context of a sentence or two, before anything was measured


@dataclass
class Estimate:
    collection: str
    contextualizer: str
    model: str
    documents: int = 0
    failing: int = 0  # would fail at chunking (empty, no text)
    chunks: int = 0
    reused: int = 0  # chunks whose context is reused (a reindex): no call
    document_tokens: int = 0
    long_documents: int = 0  # read as their opening and section windows (contextualizers.windows)
    windows: int = 0
    calls: int = 0
    input_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    output_per_call: float = 0.0
    block_chars_per_token: float = 0.0  # the document block (code and prose tokenize differently
    rest_chars_per_token: float = 0.0   # from the instruction and chunk)
    measured: list[str] = field(default_factory=list)  # figures learned from this deployment's calls
    cost_usd: float = 0.0
    cost_without_cache_usd: float = 0.0
    minutes_at_rate_limits: float = 0.0
    binding_limit: str = ""
    limits: dict[str, int] = field(default_factory=dict)

    @property
    def cost_per_million_document_tokens(self) -> float | None:
        return self.cost_usd / self.document_tokens * 1e6 if self.document_tokens else None

    @property
    def cache_read_ratio(self) -> float:
        total = self.input_tokens + self.cache_write_tokens + self.cache_read_tokens
        return self.cache_read_tokens / total if total else 0.0

    def to_json(self) -> dict[str, Any]:
        per_million = self.cost_per_million_document_tokens
        return {**asdict(self), "cache_read_ratio": round(self.cache_read_ratio, 4),
                "cost_per_million_document_tokens": round(per_million, 4) if per_million is not None else None}


class _NoProvider:
    """The planner needs a provider object to exist, never to be called."""

    model = "estimate"

    def call(self, *_: Any, **__: Any) -> Any:
        raise AssertionError("an estimate makes no call")


def _extracted(raw: Any, original: Original) -> Extracted:
    """A file as the chunk stage would see it (``stages._extract``, the same limits)."""
    try:
        return sandbox.extract(original.data, original.media_type, raw.name or raw.doc_id, Limits.from_settings())
    except ExtractionError as e:
        raise BadDocument(str(e)) from None


@dataclass
class Prepared:
    """A document as the chunk stage cuts it; ``reused``: chunk numbers whose context exists."""

    doc_id: str
    text: str
    language: str
    metadata: dict[str, Any]
    chunks: list[Chunk]
    reused: set[int] = field(default_factory=set)


def estimate(config: CollectionConfig, documents: Iterable[Any]) -> Estimate:
    """``documents``: the loaders' RawDocuments (``id``, ``text``, ``metadata``, ``chunks``)."""
    return estimate_prepared(config, (_prepared(config, raw) for raw in documents))


def _prepared(config: CollectionConfig, raw: Any) -> Prepared | None:
    """What submit would refuse, and what the chunk stage would fail: None. Cut by the chunk
    stage's own recipe (``recipe.chunks_of``), from the payload the stage would find."""
    metadata = raw.metadata or {}
    try:
        doc = valid(raw, get_settings().max_document_bytes)
        body, given = doc.body, doc.chunks
        if isinstance(body, Original):
            found = _extracted(raw, body).to_json()
            payload: dict[str, Any] = {"text": found.pop("text"), "metadata": metadata, "extracted": found}
        else:
            payload = {"text": body, "metadata": metadata,
                       "chunks": None if given is None else [c.model_dump() for c in given]}
        chunks, language, _ = recipe.chunks_of(config, payload)
    except BadDocument:
        return None
    return Prepared(raw.doc_id, payload["text"], language, metadata, chunks) if chunks else None


def estimate_prepared(config: CollectionConfig, documents: Iterable[Prepared | None]) -> Estimate:
    """The bill for documents cut already (None: one that would fail); a chunk whose context is
    reused costs no call (a reindex's estimate)."""
    result = Estimate(config.name, config.contextualizer, config.model)
    llm = config.contextualizer in registry.LLM_PROVIDERS
    planner = spec = None
    if llm:
        from workers.contextualizers.llm.scheduler import LLMContextualizer, spec_for

        planner = LLMContextualizer(config, _NoProvider(), "estimate", spec_for(config))
        spec = planner.spec
        measured = _measured(config.model, config.name)
        result.output_per_call = measured.get("output_per_call", DEFAULT_OUTPUT_TOKENS)
        result.block_chars_per_token = measured.get("block_chars_per_token", spec.chars_per_token)
        result.rest_chars_per_token = measured.get("rest_chars_per_token", spec.chars_per_token)
        result.measured = sorted(measured)
    s = get_settings()
    for prepared in documents:
        result.documents += 1
        if prepared is None:
            result.failing += 1
            continue
        text, chunks = prepared.text, prepared.chunks
        result.chunks += len(chunks)
        result.reused += len(prepared.reused)
        if planner is None or spec is None:  # not an LLM: no calls to count
            continue
        doc = SourceDocument(config.name, prepared.doc_id, "estimate", text, prepared.language, prepared.metadata,
                             chunks)
        result.document_tokens += models.estimate_tokens(text, spec)
        long_doc = models.estimate_tokens(text, spec) > planner.max_document_tokens
        if long_doc:
            result.long_documents += 1
            result.windows += len(planner.plan(doc).windows)
        written: set[str] = set()  # the cached prefixes (ending at a breakpoint) written so far
        for chunk in chunks:
            if chunk.n in prepared.reused:
                continue
            prompt = planner._prompt(doc, chunk, long_doc)
            blocks = [round(len(t) / result.block_chars_per_token) for t, _ in prompt.blocks()]
            block = sum(blocks)
            rest = max(1, round(len(prompt.instruction) / result.rest_chars_per_token))
            cacheable = prompt.cache and block >= spec.min_cacheable_tokens
            call = {"input": rest, "write": 0, "read": 0}
            if not cacheable:
                call["input"] += block
            else:  # the longest prefix written before is read, the rest written
                prefix = hashlib.sha256()
                for (t, _), tokens in zip(prompt.blocks(), blocks):
                    prefix.update(t.encode())
                    key = prefix.hexdigest()
                    if key in written and call["write"] == 0:
                        call["read"] += tokens
                    else:
                        call["write"] += tokens
                        written.add(key)
            result.calls += 1
            result.input_tokens += call["input"]
            result.cache_write_tokens += call["write"]
            result.cache_read_tokens += call["read"]
            # Priced call by call: a model's long-prompt rates depend on one prompt's size.
            result.cost_usd += models.cost_usd(spec, call["input"], call["write"], call["read"],
                                               round(result.output_per_call))
            result.cost_without_cache_usd += models.cost_usd(spec, call["input"] + call["write"] + call["read"], 0, 0,
                                                             round(result.output_per_call))
    if spec is not None:  # an LLM contextualizer
        result.output_tokens = round(result.calls * round(result.output_per_call))
        limits = s.rate_limits.get(config.model)
        if not (limits or spec.limited):  # servers of your own: no account limits to wait on
            return result
        limit = models.Limits(**limits) if limits else spec.limits
        result.limits = {"rpm": limit.rpm, "itpm": limit.itpm, "otpm": limit.otpm}
        minutes = {"requests": result.calls / limit.rpm,
                   "input tokens": (result.input_tokens + result.cache_write_tokens) / limit.itpm,
                   "output tokens": result.output_tokens / limit.otpm}
        result.binding_limit = max(minutes, key=lambda name: minutes[name])
        result.minutes_at_rate_limits = minutes[result.binding_limit]
    return result


MEASURED_AFTER_CALLS = 20


def _measured(model: str, collection: str) -> dict[str, float]:
    """What past calls to ``model`` taught (after enough of them): the mean output per call, and
    characters per token as the provider counts them (the table's figure is a guess for the
    model's tokenizer; the provider's own count is the truth). The collection's own calls
    first (more of the same documents: the same kind of text), else the whole deployment's."""
    try:
        from workers import metrics

        counters = metrics.read_counters()
    except Exception:  # no Redis: the table's figures
        return {}

    def total(name: str, scope: str | None, **labels: str) -> float:
        return sum(v for lab, v in counters.get(name, [])
                   if lab.get("model") == model and (scope is None or lab.get("collection") == scope)
                   and all(lab.get(k) == x for k, x in labels.items()))

    for scope in (collection, None):
        calls = total("llm_calls", scope)
        if calls >= MEASURED_AFTER_CALLS:
            break
    else:
        return {}
    out = {"output_per_call": total("llm_tokens", scope, kind="output") / calls}
    for part in ("block", "rest"):
        chars, tokens = total(f"llm_{part}_chars", scope), total(f"llm_{part}_tokens", scope)
        if chars and tokens:
            out[f"{part}_chars_per_token"] = chars / tokens
    return out


def estimate_reindex(name: str, **changes: Any) -> Estimate:
    """``situate reindex --estimate``: the bill of the next generation, nothing run. Each live
    document is cut from its kept body as the new generation's chunk stage will; a chunk whose
    context the live index holds (same text, version, contextualizer, model and prompt) is
    reused, no call."""
    from workers.contextualizers import reuse
    from workers.pipeline import rebuild
    from workers.storage import bodies, chunk_index, states

    live, target = rebuild.plan(name, **changes)
    reusable = reuse.reusable(live, target)

    def documents() -> Iterable[Prepared | None]:
        for doc_id in states.doc_ids(name, states.INDEXED):
            payload = bodies.body_store().kept(name, doc_id)
            if payload is None:  # indexed before bodies were kept: rebuilt from its chunks as they are
                payload = rebuild.from_chunks(live, doc_id)
            if payload is None:
                yield None
                continue
            chunks, language, _ = recipe.chunks_of(target, payload)
            known = chunk_index.contexts_by_text(live, doc_id, payload.get("version") or "") if reusable else {}
            if reusable and not payload.get("version"):  # from chunks: the indexed version's
                doc = states.get(name, doc_id)
                known = chunk_index.contexts_by_text(live, doc_id, doc["version"]) if doc else {}
            yield Prepared(doc_id, payload["text"], language, payload.get("metadata") or {}, chunks,
                           {c.n for c in chunks if c.text in known})

    return estimate_prepared(target.model_copy(update={"name": name}), documents())
