"""The model table: prices, cache minimums, context windows and default rate limits, in one
place. Costs, cache decisions (is this document long enough to cache?), long-document budgets
and the rate limiter all read from here; so does the stand-in API used by tests and benchmarks.

Prices are USD per million tokens (Anthropic list prices). A 5-minute cache write costs 1.25x
base input, a 1-hour write 2x, a cache read 0.1x; Message Batches halve everything. Limits are
per account and model, shared by all workers (see ``contextualizers.claude.ratelimit``); override them with
``SITUATE_RATE_LIMITS`` to match your tier.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def cache_write_5m(self) -> float:
        return self.input * 1.25

    @property
    def cache_write_1h(self) -> float:
        return self.input * 2.0

    @property
    def cache_read(self) -> float:
        return self.input * 0.1


MODELS: dict[str, ModelSpec] = {m.id: m for m in [
    ModelSpec("claude-3-haiku-20240307", 0.25, 1.25, 2048,
              bedrock_id="anthropic.claude-3-haiku-20240307-v1:0"),
    ModelSpec("claude-3-5-haiku-20241022", 0.80, 4.00, 2048,
              bedrock_id="anthropic.claude-3-5-haiku-20241022-v1:0"),
    ModelSpec("claude-haiku-4-5", 1.00, 5.00, 4096,
              bedrock_id="anthropic.claude-haiku-4-5-20251001-v1:0"),
    ModelSpec("claude-sonnet-4-5", 3.00, 15.00, 1024,
              bedrock_id="anthropic.claude-sonnet-4-5-20250929-v1:0", limits=Limits(50, 30_000, 8_000)),
    ModelSpec("claude-opus-4-1", 15.00, 75.00, 1024,
              bedrock_id="anthropic.claude-opus-4-1-20250805-v1:0", limits=Limits(50, 30_000, 8_000)),
]}
DEFAULT_MODEL = "claude-haiku-4-5"
# The default cache entry lives 5 minutes from its last hit. A document part that starts later
# than this after the last call on its document must warm the cache again, not assume a read.
CACHE_TTL_S = 300
CACHE_TRUST_S = 240  # the margin covers clock skew between workers and time in flight


def get(model: str) -> ModelSpec:
    """By Anthropic id or Bedrock id (with or without a region prefix such as ``us.``)."""
    if model in MODELS:
        return MODELS[model]
    for spec in MODELS.values():
        if spec.bedrock_id and (model == spec.bedrock_id or model.endswith("." + spec.bedrock_id)):
            return spec
    raise ValueError(f"unknown model {model!r}; known: {sorted(MODELS)} (add it to workers/models.py)")


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate (~3.6 characters per token for English and code), used for
    budgets and rate-limit reservations; real counts come back in each response's usage."""
    return max(1, round(len(text) / 3.6))


def cost_usd(spec: ModelSpec, input_tokens: int, cache_write: int, cache_read: int, output_tokens: int,
             batch: bool = False, ttl: str = "5m") -> float:
    write_price = spec.cache_write_1h if ttl == "1h" else spec.cache_write_5m
    total = (input_tokens * spec.input + cache_write * write_price + cache_read * spec.cache_read
             + output_tokens * spec.output) / 1e6
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
