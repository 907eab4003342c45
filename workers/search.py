"""Hybrid search: BM25 and k-NN in one ``_msearch`` round trip, fused, optionally reranked.

BM25 runs over two fields, the chunk's ``text`` (weight 1) and its ``context`` (the
collection's ``context_weight``), so a context adds terms without outvoting the chunk.

Fusion, per collection and overridable per query:

- ``rrf`` (default): a chunk scores sum(w / (k + rank)) over the sides that found it, k = 60,
  w = 1 for BM25 and ``dense_weight`` for k-NN. Ranks are comparable across sides; scores
  are not (BM25 is unbounded and varies per query, cosine sits in a narrow band).
- ``weighted``: each side's scores min-max scaled to [0, 1] over its candidates, then
  summed with the same weights. It keeps how far ahead a winner is, which RRF forgets, at
  the price of trusting one outlier score per side.

Each side returns its top ``candidates`` (150, as Anthropic's setup does before reranking);
a reranker, when asked, reorders the fused top ``candidates`` and the top k are returned.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workers import embedders
from workers.collections import FUSIONS, CollectionConfig
from workers.connections import opensearch_client

RRF_K = 60
CANDIDATES = 150
MODES = ("hybrid", "bm25", "dense")
_SOURCE = ["doc_id", "chunk", "text", "context", "metadata"]


@dataclass
class Hit:
    doc_id: str
    chunk: int
    score: float
    text: str
    context: str
    metadata: dict[str, Any] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)  # rank per side (bm25, dense, rerank)


@dataclass(frozen=True)
class SearchOptions:
    """How to search a collection; ``None`` fields take the collection's stored defaults."""

    mode: str = "hybrid"
    fusion: str | None = None
    context_weight: float | None = None
    dense_weight: float | None = None
    reranker: str | None = None  # None: SITUATE_RERANKER; "none": no reranking
    candidates: int = CANDIDATES

    def resolved(self, config: CollectionConfig) -> "SearchOptions":
        from workers.settings import get_settings

        opts = SearchOptions(
            self.mode,
            self.fusion if self.fusion is not None else config.fusion,
            self.context_weight if self.context_weight is not None else config.context_weight,
            self.dense_weight if self.dense_weight is not None else (
                config.dense_weight if config.dense_weight is not None else 1.0),
            self.reranker if self.reranker is not None else get_settings().reranker,
            self.candidates,
        )
        if opts.mode not in MODES:
            raise ValueError(f"unknown search mode {opts.mode!r}; choose one of {MODES}")
        if opts.fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {opts.fusion!r}; choose one of {FUSIONS}")
        if opts.reranker:
            from workers import rerankers

            rerankers.check(opts.reranker)
        return opts


def filter_clauses(filters: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``{"doc_id": "a"}`` or ``{"lang": ["rust", "go"]}`` -> term(s) filters on metadata."""
    clauses = []
    for key, value in (filters or {}).items():
        name = key if key in ("doc_id", "version") else f"metadata.{key}"
        if isinstance(value, list):
            clauses.append({"terms": {name: value}})
        else:
            clauses.append({"term": {name: value}})
    return clauses


def bm25_body(query: str, filters: list[dict[str, Any]], size: int, context_weight: float) -> dict[str, Any]:
    fields = ["text"] + ([f"context^{context_weight}"] if context_weight > 0 else [])
    match = {"multi_match": {"query": query, "fields": fields, "type": "most_fields"}}
    return {"size": size, "_source": _SOURCE, "query": {"bool": {"must": [match], "filter": filters}}}


def knn_body(vector: list[float], filters: list[dict[str, Any]], size: int) -> dict[str, Any]:
    knn: dict[str, Any] = {"vector": vector, "k": size}
    if filters:  # Lucene filters during the graph search, so k results survive the filter
        knn["filter"] = {"bool": {"filter": filters}}
    return {"size": size, "_source": _SOURCE, "query": {"knn": {"vector": knn}}}


def _hit(h: dict[str, Any]) -> Hit:
    s = h["_source"]
    return Hit(s["doc_id"], s["chunk"], 0.0, s["text"], s.get("context", ""), s.get("metadata") or {})


def fuse(result_lists: dict[str, list[dict[str, Any]]], weights: dict[str, float], fusion: str = "rrf",
         k: int = RRF_K) -> list[Hit]:
    """Raw OpenSearch hits per side -> one ranking. See the module docstring for the two rules."""
    fused: dict[str, Hit] = {}
    for side, hits in result_lists.items():
        weight = weights.get(side, 1.0)
        scores = [h.get("_score") or 0.0 for h in hits]
        low, high = (min(scores), max(scores)) if scores else (0.0, 0.0)
        for rank, h in enumerate(hits, start=1):
            hit = fused.get(h["_id"])
            if hit is None:
                hit = fused[h["_id"]] = _hit(h)
            if fusion == "rrf":
                hit.score += weight / (k + rank)
            else:
                hit.score += weight * (((h.get("_score") or 0.0) - low) / (high - low) if high > low else 1.0)
            hit.ranks[side] = rank
    return sorted(fused.values(), key=lambda h: (-h.score, h.doc_id, h.chunk))


def rrf(result_lists: dict[str, list[dict[str, Any]]], k: int = RRF_K) -> list[Hit]:
    return fuse(result_lists, {}, "rrf", k)


def search(config: CollectionConfig, query: str, k: int = 10, filters: dict[str, Any] | None = None,
           mode: str = "hybrid", candidates: int = CANDIDATES,
           options: SearchOptions | None = None) -> list[Hit]:
    """Top ``k`` chunks for ``query``. ``options`` overrides the collection's defaults; the
    ``mode`` and ``candidates`` arguments are shorthands for the common case."""
    opts = (options or SearchOptions(mode=mode, candidates=candidates)).resolved(config)
    if not query.strip():
        return []
    clauses = filter_clauses(filters)
    size = max(opts.candidates, k)
    sides: dict[str, dict[str, Any]] = {}
    if opts.mode in ("hybrid", "bm25"):
        sides["bm25"] = bm25_body(query, clauses, size, opts.context_weight)
    if opts.mode in ("hybrid", "dense"):
        vector = embedders.get(config.embedder, config.embed_model).embed_query(query)
        sides["dense"] = knn_body([float(x) for x in vector], clauses, size)
    lines: list[dict[str, Any]] = []
    for body in sides.values():
        lines += [{"index": config.index_name}, body]
    responses = opensearch_client().msearch(body=lines)["responses"]
    results = {}
    for side, response in zip(sides, responses):
        if "error" in response:
            raise RuntimeError(f"{side} search failed: {response['error']}")
        results[side] = response["hits"]["hits"]
    ranked = fuse(results, {"bm25": 1.0, "dense": opts.dense_weight}, opts.fusion)
    if opts.reranker and opts.reranker != "none":
        from workers import rerankers

        ranked = rerankers.rerank(opts.reranker, query, ranked[:opts.candidates])
    return ranked[:k]
