"""``situate tune``: the search settings that suit *your* data, chosen on your labelled queries
without grading them on the very queries they were chosen on.

Each query is searched once per side — k-NN once, BM25 once per context weight tried — and the
candidates are kept; every combination of fusion (RRF with its k, or weighted scores), dense
weight and context weight is then replayed in memory, which is why a grid of hundreds of
settings costs seconds, not hundreds of searches. The queries are split into folds: for each
fold, the setting that scores best on the *other* folds is graded on this one, and the graded
rankings of all folds together give the held-out score — what the winning recipe, not the
winning setting, is worth on queries it has not seen. The current defaults are graded on all
queries beside it (they were not fitted to them). ``--apply`` stores the setting that scores
best on all queries as the collection's search defaults.

With a reranker named, every setting is also tried reranked (the fused top ``CANDIDATES``
reordered, as search does). The reranker scores each distinct candidate of a query once — the
union of both sides' candidates — and the replays reuse those scores; with a paid reranker
that union is what the tuning costs.
"""

from __future__ import annotations

import itertools
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from producers.evaluation.evaluate import KS, EvalResult, LabelledQuery, Retrieved, grade_query, summarize
from producers.retrieval.fusion import fuse
from producers.retrieval.search import CANDIDATES, bm25_body, knn_body, newest_only
from workers.connections import opensearch_client
from workers.contextualizers.base import contextualized_text
from workers.embedding import registry as embedders
from workers.storage import index_mapping
from workers.storage.catalog import CollectionConfig

CONTEXT_WEIGHTS = (0.0, 0.5, 1.0, 2.0)
DENSE_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 100.0)  # 0: BM25 alone; 100: all but dense alone
RRF_KS = (10, 30, 60, 100)


@dataclass(frozen=True)
class Setting:
    fusion: str
    dense_weight: float
    context_weight: float
    rrf_k: int = 60
    reranker: str = "none"

    def label(self) -> str:
        k = f", k={self.rrf_k}" if self.fusion == "rrf" else ""
        reranked = f", reranked by {self.reranker}" if self.reranker != "none" else ""
        return f"{self.fusion}{k}, dense {self.dense_weight:g}, context {self.context_weight:g}{reranked}"


def grid(has_contexts: bool, reranker: str = "none") -> list[Setting]:
    contexts = CONTEXT_WEIGHTS if has_contexts else (0.0,)
    out = [Setting("rrf", d, c, k) for d, c, k in itertools.product(DENSE_WEIGHTS, contexts, RRF_KS)]
    out += [Setting("weighted", d, c) for d, c in itertools.product(DENSE_WEIGHTS, contexts)]
    if reranker != "none":
        out += [replace(s, reranker=reranker) for s in out]
    return out


def side_rankings(config: CollectionConfig, queries: list[LabelledQuery], context_weights: Sequence[float] = CONTEXT_WEIGHTS,
                  candidates: int = CANDIDATES) -> list[dict[str, list[dict[str, Any]]]]:
    """Per query, each side's candidates: ``dense`` and ``bm25@<context weight>``."""
    embedder = embedders.get(config.embedder, config.embed_model)
    out = []
    for q in queries:
        # Whole hits: a label may be a passage of text, matched against the hits' text.
        sides = {f"bm25@{w:g}": bm25_body(q.query, [], candidates, w, light=False) for w in context_weights}
        sides["dense"] = knn_body(index_mapping.stored_vector(config, embedder.embed_query(q.query)), [], candidates,
                                    light=False)
        lines: list[dict[str, Any]] = []
        for body in sides.values():
            lines += [{"index": config.index_name}, body]
        responses = opensearch_client().msearch(body=lines)["responses"]
        out.append({side: r["hits"]["hits"] for side, r in zip(sides, responses)})
    return out


def add_rerank_scores(queries: list[LabelledQuery], rankings: list[dict[str, Any]], reranker: str) -> int:
    """Score every distinct candidate of each query once with ``reranker``; the scores go into
    the query's rankings under ``"rerank"`` (by index ``_id``). Returns how many were scored."""
    from producers.retrieval import rerankers

    model = rerankers.get(reranker)
    scored = 0
    for q, sides in zip(queries, rankings):
        distinct = {h["_id"]: h for side, hits in sides.items() if side != "rerank" for h in hits}
        texts = [contextualized_text(h["_source"].get("context", ""), h["_source"].get("text", ""))
                 for h in distinct.values()]
        sides["rerank"] = dict(zip(distinct, model.scores(q.query, texts))) if texts else {}
        scored += len(texts)
    return scored


def ranked(sides: dict[str, Any], setting: Setting, k: int = max(KS)) -> list[Retrieved]:
    chosen = {"bm25": sides[f"bm25@{setting.context_weight:g}"], "dense": sides["dense"]}
    if setting.dense_weight >= 100:
        chosen = {"dense": sides["dense"]}
    elif setting.dense_weight == 0:
        chosen = {"bm25": chosen["bm25"]}
    hits = fuse(newest_only(chosen), {"bm25": 1.0, "dense": setting.dense_weight}, setting.fusion, setting.rrf_k)
    if setting.reranker != "none":
        scores = sides["rerank"]  # as rerankers.rerank: the fused top CANDIDATES, ties by fused rank
        hits = sorted(hits[:CANDIDATES], key=lambda h: -scores.get(h.id, float("-inf")))
    return [Retrieved(h.doc_id, h.chunk, h.text, h.pages) for h in hits[:k]]


def grade(queries: list[LabelledQuery], rankings: list[dict[str, Any]], setting: Setting, label: str | None = None) -> EvalResult:
    return summarize(label or setting.label(), [grade_query(q, ranked(r, setting)) for q, r in zip(queries, rankings)])


def objective(result: EvalResult) -> float:
    """What "best" means: Pass@k averaged over k = 5, 10, 20 (the top, and the reach)."""
    return statistics.fmean(result.pass_at[k] for k in KS)


@dataclass
class TuneReport:
    queries: int
    folds: int
    current: EvalResult
    held_out: EvalResult          # the recipe "pick the best on the rest", graded fold by fold
    winner: Setting               # the best on all queries: what --apply stores
    winner_all: EvalResult        # its score on all queries (optimistic: fitted on them)
    fold_winners: list[Setting]

    def summary(self) -> dict[str, Any]:
        return {"queries": self.queries, "folds": self.folds, "current": self.current.summary(),
                "held_out": self.held_out.summary(), "winner": asdict(self.winner),
                "winner_on_all_queries": self.winner_all.summary(),
                "fold_winners": [asdict(w) for w in self.fold_winners],
                "held_out_gain_pass@10": round(self.held_out.pass_at[10] - self.current.pass_at[10], 2)}


def tune(queries: list[LabelledQuery], rankings: list[dict[str, Any]], current: Setting, settings: list[Setting],
         folds: int = 5, seed: int = 0) -> TuneReport:
    if len(queries) < 2 * folds:
        raise ValueError(f"{len(queries)} labelled queries are too few for {folds} folds (at least {2 * folds})")
    order = list(range(len(queries)))
    random.Random(seed).shuffle(order)
    fold_of = {i: n % folds for n, i in enumerate(order)}
    # Per setting, per query: its row (pass@k, ranks) — computed once, then summed by fold.
    rows = {s: grade(queries, rankings, s).per_query for s in settings}
    held_rows: dict[int, dict[str, Any]] = {}
    winners = []
    for f in range(folds):
        train = [i for i in range(len(queries)) if fold_of[i] != f]
        best = max(settings, key=lambda s: (statistics.fmean(statistics.fmean(rows[s][i][f"pass@{k}"] for k in KS)
                                                             for i in train), _tie_break(s, current)))
        winners.append(best)
        for i in range(len(queries)):
            if fold_of[i] == f:
                held_rows[i] = rows[best][i]
    held_out = summarize(f"held out ({folds} folds)", [held_rows[i] for i in range(len(queries))])
    winner = max(settings, key=lambda s: (statistics.fmean(statistics.fmean(r[f"pass@{k}"] for k in KS)
                                                           for r in rows[s]), _tie_break(s, current)))
    return TuneReport(len(queries), folds, grade(queries, rankings, current, "current defaults"), held_out,
                      winner, grade(queries, rankings, winner, "winner, on all queries"), winners)


def _tie_break(setting: Setting, current: Setting) -> tuple[Any, ...]:
    """Between equals, the current defaults, then the plainest (and cheapest) setting."""
    return (setting == current, setting.reranker == "none", setting.fusion == "rrf", -abs(setting.dense_weight - 1),
            -setting.context_weight)
