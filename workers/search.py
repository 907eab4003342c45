"""Hybrid search: BM25 and k-NN in one ``_msearch`` round trip, fused by reciprocal rank.

Why RRF and not score blending: BM25 scores are unbounded and vary per query while cosine
scores sit in a narrow band; ranks are comparable, scores are not. Each side returns its
top ``candidates`` (150, as Anthropic's setup does before reranking); a chunk scores
sum(1 / (k + rank)) over the sides that found it, k = 60.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workers import embedders
from workers.collections import CollectionConfig
from workers.connections import opensearch_client

RRF_K = 60
CANDIDATES = 150
_SOURCE = ["doc_id", "chunk", "text", "context", "metadata"]


@dataclass
class Hit:
    doc_id: str
    chunk: int
    score: float
    text: str
    context: str
    metadata: dict[str, Any] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)  # rank per side, for explanation/eval


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


def bm25_body(query: str, filters: list[dict[str, Any]], size: int) -> dict[str, Any]:
    return {"size": size, "_source": _SOURCE,
            "query": {"bool": {"must": [{"match": {"contextualized": query}}], "filter": filters}}}


def knn_body(vector: list[float], filters: list[dict[str, Any]], size: int) -> dict[str, Any]:
    knn: dict[str, Any] = {"vector": vector, "k": size}
    if filters:  # Lucene filters during the graph search, so k results survive the filter
        knn["filter"] = {"bool": {"filter": filters}}
    return {"size": size, "_source": _SOURCE, "query": {"knn": {"vector": knn}}}


def rrf(result_lists: dict[str, list[dict[str, Any]]], k: int = RRF_K) -> list[Hit]:
    fused: dict[str, Hit] = {}
    for side, hits in result_lists.items():
        for rank, h in enumerate(hits, start=1):
            hit = fused.get(h["_id"])
            if hit is None:
                s = h["_source"]
                hit = fused[h["_id"]] = Hit(s["doc_id"], s["chunk"], 0.0, s["text"], s.get("context", ""),
                                            s.get("metadata") or {})
            hit.score += 1.0 / (k + rank)
            hit.ranks[side] = rank
    return sorted(fused.values(), key=lambda h: (-h.score, h.doc_id, h.chunk))


def search(config: CollectionConfig, query: str, k: int = 10, filters: dict[str, Any] | None = None,
           mode: str = "hybrid", candidates: int = CANDIDATES) -> list[Hit]:
    """``mode``: hybrid (default), bm25 or dense."""
    if not query.strip():
        return []
    clauses = filter_clauses(filters)
    size = max(candidates, k)
    sides: dict[str, dict[str, Any]] = {}
    if mode in ("hybrid", "bm25"):
        sides["bm25"] = bm25_body(query, clauses, size)
    if mode in ("hybrid", "dense"):
        vector = embedders.get(config.embedder).embed_query(query)
        sides["dense"] = knn_body([float(x) for x in vector], clauses, size)
    if not sides:
        raise ValueError(f"unknown search mode {mode!r}")
    lines: list[dict[str, Any]] = []
    for body in sides.values():
        lines += [{"index": config.index_name}, body]
    responses = opensearch_client().msearch(body=lines)["responses"]
    results = {}
    for side, response in zip(sides, responses):
        if "error" in response:
            raise RuntimeError(f"{side} search failed: {response['error']}")
        results[side] = response["hits"]["hits"]
    return rrf(results)[:k]
