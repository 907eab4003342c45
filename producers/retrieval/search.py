"""Hybrid search: BM25 and k-NN in one ``_msearch`` round trip, fused, optionally reranked.

BM25 runs over two fields, the chunk's ``text`` (weight 1) and its ``context`` (the
collection's ``context_weight``), so a context adds terms without outvoting the chunk. Each
side returns its top ``candidates`` (150, as Anthropic's setup does before reranking); the
sides are fused (``fusion``); a reranker, when asked, reorders the fused top ``candidates``
(``rerankers``) and the top k are returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from producers.retrieval.fusion import Hit, fuse
from workers.connections import opensearch_client
from workers.embedding import registry as embedders
from workers.settings import get_settings
from workers.storage.catalog import FUSIONS, CollectionConfig

CANDIDATES = 150
MODES = ("hybrid", "bm25", "dense")
_SOURCE = ["doc_id", "chunk", "text", "context", "metadata", "seq"]


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
            from producers.retrieval import rerankers

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


def newest_only(results: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """One version per document: while a new version is being written and the old one not yet
    removed, both may match; only the chunks of the newest (largest ``seq``) are kept."""
    newest: dict[str, int] = {}
    for hits in results.values():
        for h in hits:
            doc, seq = h["_source"]["doc_id"], h["_source"].get("seq", 0)
            newest[doc] = max(newest.get(doc, seq), seq)
    return {side: [h for h in hits if h["_source"].get("seq", 0) == newest[h["_source"]["doc_id"]]]
            for side, hits in results.items()}


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
    ranked = fuse(newest_only(results), {"bm25": 1.0, "dense": opts.dense_weight}, opts.fusion)
    if opts.reranker and opts.reranker != "none":
        from producers.retrieval import rerankers

        ranked = rerankers.rerank(opts.reranker, query, ranked[:opts.candidates])
    return ranked[:k]
