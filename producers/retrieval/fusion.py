"""One ranking out of several: BM25's and k-NN's hits fused, by rank or by score.

- ``rrf`` (default): a chunk scores sum(w / (k + rank)) over the sides that found it, k = 60,
  w = 1 for BM25 and ``dense_weight`` for k-NN. Ranks are comparable across sides; scores
  are not (BM25 is unbounded and varies per query, cosine sits in a narrow band).
- ``weighted``: each side's scores min-max scaled to [0, 1] over its candidates, then
  summed with the same weights. It keeps how far ahead a winner is, which RRF forgets, at
  the price of trusting one outlier score per side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RRF_K = 60


@dataclass
class Hit:
    doc_id: str
    chunk: int
    score: float
    text: str
    context: str
    metadata: dict[str, Any] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)  # rank per side (bm25, dense, rerank)
    id: str = ""  # the index _id
    # Where it came from (documents with pages and sections): [first, last] page, heading path, title.
    pages: list[int] | None = None
    section: str | None = None
    title: str | None = None


def _hit(h: dict[str, Any]) -> Hit:
    s = h["_source"]  # a light hit has no text yet: the read path fills the ones it returns
    return Hit(s["doc_id"], s["chunk"], 0.0, s.get("text", ""), s.get("context", ""), s.get("metadata") or {},
               id=h["_id"], pages=s.get("pages"), section=s.get("section"), title=s.get("title"))


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
