"""The model table: prices, cache minimums, context windows and default rate limits, in one
place. Costs, cache decisions (is this document long enough to cache?), long-document budgets
and the rate limiter all read from here; so does the stand-in API used by tests and benchmarks.

Prices are USD per million tokens, from Anthropic's pricing and model pages (the CHANGELOG says
when the table was last read).
A 5-minute cache write costs 1.25x base input, a 1-hour write 2x; a cache read 0.1x on most
models, less on the newest (``read_multiplier``); Message Batches halve everything. Claude
Haiku 5.5 is priced by prompt length: a prompt over 100,000 tokens pays its higher rates on
every token. Cache minimums marked "assumed" were not published where we looked: a breakpoint
below the real minimum costs nothing (the API caches nothing and says so in usage), so a low
guess is the safe one. Limits are per account and model, shared by all workers (see
``contextualizers.llm.ratelimit``); ``SITUATE_RATE_LIMITS`` sets your tier's.

``SITUATE_MODELS`` adds or overrides models without a release:
``{"claude-x": {"input": 1.0, "output": 5.0, "min_cacheable_tokens": 2048, "bedrock_id": "..."}}``.
The same table prices a hosted OpenAI-compatible model, per million input, cached input and output
tokens: ``{"gpt-5-mini": {"input": 0.25, "cached_input": 0.025, "output": 2.0}}``. A model your own
servers serve is not in it (``served``): its name is the operator's, it costs nothing per token, and
the bill shows its tokens and time.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field, fields, replace
from typing import Any

from workers.settings import get_settings


@dataclass(frozen=True)
class Limits:
    rpm: int       # requests per minute
    itpm: int      # input tokens per minute: uncached input + cache writes (reads don't count)
    otpm: int      # output tokens per minute


@dataclass(frozen=True)
class ModelSpec:
    id: str
    input: float
    output: float
    min_cacheable_tokens: int
    context_window: int = 200_000
    bedrock_id: str | None = None
    limits: Limits = Limits(rpm=50, itpm=50_000, otpm=10_000)
    batch_discount: float = 0.5
    read_multiplier: float = 0.1
    # Characters per token for the estimate (the tokenizer of Claude 4.7 and later counts the
    # same text ~30% longer than earlier models').
    chars_per_token: float = 3.6
    end_of_life: str = ""          # ISO date: deprecated until then, retired after
    # Prompts over this many tokens pay the ``long_*`` rates on every token (Haiku 5.5).
    long_prompt_tokens: int | None = None
    long_input: float = 0.0
    long_output: float = 0.0
    # Request fields a model needs for a plain, short answer (no thinking where it can be off).
    request_extras: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    # USD per million cached input tokens where a provider prices them itself (else input x read_multiplier).
    cached_input: float | None = None
    # Its limits are an account's (a hosted API): False for a server of your own, which queues.
    limited: bool = True

    def rates(self, prompt_tokens: int) -> tuple[float, float]:
        """(input, output) USD per million tokens for a prompt of this size."""
        if self.long_prompt_tokens and prompt_tokens > self.long_prompt_tokens:
            return self.long_input, self.long_output
        return self.input, self.output

    @property
    def cache_write_5m(self) -> float:
        return self.input * 1.25

    @property
    def cache_write_1h(self) -> float:
        return self.input * 2.0

    @property
    def cache_read(self) -> float:
        return self.cached_input if self.cached_input is not None else self.input * self.read_multiplier

    @property
    def read_share(self) -> float:
        """What a cached input token costs, as a share of an uncached one."""
        return self.cached_input / self.input if self.cached_input is not None and self.input else self.read_multiplier


NEW_TOKENIZER = 2.8  # ~3.6 / 1.3
NO_THINKING = {"thinking": {"type": "disabled"}}

MODELS: dict[str, ModelSpec] = {m.id: m for m in [
    # Current
    # Cache minimum 512 tokens before a breakpoint: the user's source (seeds/000: "Sur Claude
    # Haiku 5.5, un point de cache demande au moins 512 tokens avant lui").
    ModelSpec("claude-haiku-5-5", 0.10, 0.50, 512, 1_000_000, "anthropic.claude-haiku-5-5",
              chars_per_token=NEW_TOKENIZER, long_prompt_tokens=100_000, long_input=0.50, long_output=2.50,
              request_extras=NO_THINKING),
    ModelSpec("claude-sonnet-5-5", 2.00, 10.00, 1024, 1_000_000, "anthropic.claude-sonnet-5-5",  # minimum assumed
              read_multiplier=0.05, chars_per_token=NEW_TOKENIZER, limits=Limits(50, 30_000, 8_000)),
    ModelSpec("claude-opus-5-5", 4.00, 20.00, 512, 1_000_000, "anthropic.claude-opus-5-5",  # minimum assumed
              read_multiplier=0.05, chars_per_token=NEW_TOKENIZER, limits=Limits(50, 30_000, 8_000)),
    ModelSpec("claude-fable-5-1", 10.00, 50.00, 512, 1_000_000,  # minimum assumed
              read_multiplier=0.025, chars_per_token=NEW_TOKENIZER, limits=Limits(50, 30_000, 8_000)),
    ModelSpec("claude-haiku-4-5", 1.00, 5.00, 4096, bedrock_id="anthropic.claude-haiku-4-5-20251001-v1:0"),
    # Legacy, still served
    ModelSpec("claude-opus-5", 5.00, 25.00, 512, 1_000_000, "anthropic.claude-opus-5",
              chars_per_token=NEW_TOKENIZER, limits=Limits(50, 30_000, 8_000)),
    ModelSpec("claude-sonnet-5", 2.00, 10.00, 1024, 1_000_000, "anthropic.claude-sonnet-5",
              chars_per_token=NEW_TOKENIZER, limits=Limits(50, 30_000, 8_000)),
    ModelSpec("claude-opus-4-8", 5.00, 25.00, 1024, chars_per_token=NEW_TOKENIZER, limits=Limits(50, 30_000, 8_000)),
    ModelSpec("claude-opus-4-7", 5.00, 25.00, 2048, chars_per_token=NEW_TOKENIZER, limits=Limits(50, 30_000, 8_000)),
    ModelSpec("claude-opus-4-6", 5.00, 25.00, 4096, limits=Limits(50, 30_000, 8_000)),
    ModelSpec("claude-sonnet-4-6", 3.00, 15.00, 1024, limits=Limits(50, 30_000, 8_000)),
    # Deprecated (the anthropic SDK warns of these)
    ModelSpec("claude-opus-4-5", 5.00, 25.00, 4096, bedrock_id="anthropic.claude-opus-4-5-20251101-v1:0",
              end_of_life="2027-01-22", limits=Limits(50, 30_000, 8_000)),
    ModelSpec("claude-sonnet-4-5", 3.00, 15.00, 1024, bedrock_id="anthropic.claude-sonnet-4-5-20250929-v1:0",
              end_of_life="2026-11-30", limits=Limits(50, 30_000, 8_000)),
]}
DEFAULT_MODEL = "claude-haiku-5-5"
# The default cache entry lives 5 minutes from its last hit. A document part that starts later
# than this after the last call on its document must warm the cache again, not assume a read.
CACHE_TTL_S = 300
CACHE_TRUST_S = 240  # the margin covers clock skew between workers and time in flight


def _overrides() -> None:
    """``SITUATE_MODELS``: models of the operator's own, or corrections to ours."""
    raw = get_settings().models.strip()
    if not raw:
        return
    known = {f.name for f in fields(ModelSpec)}
    for model_id, values in json.loads(raw).items():
        values = {k: v for k, v in values.items() if k in known and k != "id"}
        if isinstance(values.get("limits"), dict):
            values["limits"] = Limits(**values["limits"])
        MODELS[model_id] = (replace(MODELS[model_id], **values) if model_id in MODELS
                            else ModelSpec(model_id, **{"input": 0.0, "output": 0.0, "min_cacheable_tokens": 0, **values}))


_overrides()


def get(model: str) -> ModelSpec:
    """By Anthropic id or Bedrock id (with or without a region prefix such as ``us.``)."""
    if model in MODELS:
        return MODELS[model]
    for spec in MODELS.values():
        if spec.bedrock_id and (model == spec.bedrock_id or model.endswith("." + spec.bedrock_id)):
            return spec
    raise ValueError(f"unknown model {model!r}; known: {sorted(MODELS)} (add it with SITUATE_MODELS)")


def served(model: str) -> ModelSpec:
    """A model of the ``openai`` contextualizer: the table's entry when the operator priced it
    (``SITUATE_MODELS``: a hosted API), else a model of your own servers — any name, free per
    token, no account limits, a prefix cached from its first token, its window
    ``SITUATE_OPENAI_CONTEXT_TOKENS``."""
    s = get_settings()
    if model in MODELS:
        spec = MODELS[model]
        return replace(spec, context_window=min(spec.context_window, s.openai_context_tokens))
    # Open models' tokenizers are not Claude's: they count code at about half Claude's characters a
    # token (``ops/bench written`` found a file read whole that a server's window refused). The
    # estimate that decides whether a document is read whole must not be Claude's.
    return ModelSpec(model, 0.0, 0.0, 0, s.openai_context_tokens, limited=False, chars_per_token=s.openai_chars_per_token)


def lifecycle_note(spec: ModelSpec, today: datetime.date | None = None) -> tuple[str, str]:
    """("active" | "deprecated" | "retired", a sentence for the operator)."""
    today = today or datetime.date.today()
    end = spec.end_of_life or _sdk_end_of_life(spec.id)
    if not end:
        return "active", ""
    date = datetime.date.fromisoformat(end)
    if date <= today:
        return "retired", f"{spec.id} reached end of life on {end}; choose a current model (default {DEFAULT_MODEL})"
    return "deprecated", f"{spec.id} is deprecated and reaches end of life on {end}; plan a move to a current model"


def _sdk_end_of_life(model: str) -> str:
    """What the installed anthropic SDK knows: it lists deprecated models with their end-of-life."""
    try:
        from anthropic._data import DEPRECATED_MODELS
    except ImportError:
        return ""
    text = DEPRECATED_MODELS.get(model, "")
    for fmt in ("%B %d, %Y",):
        try:
            cleaned = text.replace("st,", ",").replace("nd,", ",").replace("rd,", ",").replace("th,", ",")
            return datetime.datetime.strptime(cleaned, fmt).date().isoformat()
        except ValueError:
            pass
    return ""


def estimate_tokens(text: str, spec: ModelSpec | None = None) -> int:
    """A tokenizer-free estimate (~3.6 characters per token for English and code on most
    models, fewer on the newest), for budgets and rate-limit reservations; real counts come
    back in each response's usage."""
    return max(1, round(len(text) / (spec.chars_per_token if spec else 3.6)))


def cost_usd(spec: ModelSpec, input_tokens: int, cache_write: int, cache_read: int, output_tokens: int,
             batch: bool = False, ttl: str = "5m") -> float:
    base_in, base_out = spec.rates(input_tokens + cache_write + cache_read)
    write_price = base_in * (2.0 if ttl == "1h" else 1.25)
    total = (input_tokens * base_in + cache_write * write_price + cache_read * base_in * spec.read_share
             + output_tokens * base_out) / 1e6
    return total * (spec.batch_discount if batch else 1.0)


# -- Embedding and rerank models -----------------------------------------------------------
# Request limits are the providers' documented per-request caps; ``price`` is USD per million
# tokens. The dimension is what the index is created with: a collection never changes it.

@dataclass(frozen=True)
class EmbeddingSpec:
    id: str
    provider: str                 # voyage | voyage-context | bedrock
    dimension: int
    max_texts: int                # texts per request
    max_request_tokens: int       # all texts of one request together
    max_text_tokens: int = 32_000  # one text (voyage-context: one document's chunks together)
    price: float = 0.0


EMBEDDING_MODELS: dict[str, EmbeddingSpec] = {m.id: m for m in [
    EmbeddingSpec("voyage-3.5", "voyage", 1024, 1000, 320_000, price=0.06),
    EmbeddingSpec("voyage-3.5-lite", "voyage", 1024, 1000, 1_000_000, price=0.02),
    EmbeddingSpec("voyage-3-large", "voyage", 1024, 1000, 120_000, price=0.18),
    EmbeddingSpec("voyage-code-3", "voyage", 1024, 1000, 120_000, price=0.18),
    EmbeddingSpec("voyage-context-3", "voyage-context", 1024, 1000, 120_000, price=0.18),
    EmbeddingSpec("amazon.titan-embed-text-v2:0", "bedrock", 1024, 1, 8_000, 8_000, price=0.02),
    EmbeddingSpec("cohere.embed-english-v3", "bedrock", 1024, 96, 96 * 512, 512, price=0.10),
    EmbeddingSpec("cohere.embed-multilingual-v3", "bedrock", 1024, 96, 96 * 512, 512, price=0.10),
]}
DEFAULT_EMBEDDING_MODEL = {"voyage": "voyage-3.5", "voyage-context": "voyage-context-3",
                           "bedrock": "amazon.titan-embed-text-v2:0"}


def embedding_model(provider: str, model: str) -> EmbeddingSpec:
    spec = EMBEDDING_MODELS.get(model or DEFAULT_EMBEDDING_MODEL[provider])
    if spec is None or spec.provider != provider:
        known = sorted(m for m, s in EMBEDDING_MODELS.items() if s.provider == provider)
        raise ValueError(f"unknown {provider} embedding model {model!r}; known: {known} (add it to workers/models.py)")
    return spec


@dataclass(frozen=True)
class RerankSpec:
    id: str
    provider: str            # voyage | bedrock | cohere
    max_documents: int
    price_per_1k_searches: float = 0.0  # Bedrock bills per query; Voyage per token (price below)
    price: float = 0.0


RERANK_MODELS: dict[str, RerankSpec] = {m.id: m for m in [
    RerankSpec("rerank-2.5", "voyage", 1000, price=0.05),
    RerankSpec("rerank-2.5-lite", "voyage", 1000, price=0.02),
    RerankSpec("cohere.rerank-v3-5:0", "bedrock", 1000, price_per_1k_searches=2.0),
    RerankSpec("amazon.rerank-v1:0", "bedrock", 1000, price_per_1k_searches=1.0),
    RerankSpec("rerank-v3.5", "cohere", 1000, price_per_1k_searches=2.0),
]}
DEFAULT_RERANK_MODEL = {"voyage": "rerank-2.5", "bedrock": "cohere.rerank-v3-5:0", "cohere": "rerank-v3.5"}
