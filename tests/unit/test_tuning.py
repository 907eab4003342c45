"""``situate tune``'s cross-validation, on rankings made up so the answer is known."""

from __future__ import annotations

import random

from producers.evaluation import tuning
from producers.evaluation.evaluate import Gold, LabelledQuery


def hit(doc: str, chunk: int, score: float) -> dict:
    return {"_id": f"{doc}-{chunk}", "_score": score, "_source": {"doc_id": doc, "chunk": chunk, "text": "", "seq": 1}}


def made_up(n: int = 60, seed: int = 1, at: int = 0):
    """Dense finds the golden chunk (at rank ``at`` + 1) for 80% of the queries, BM25 (any
    context weight) for 30%; otherwise that side does not find it at all."""
    rng = random.Random(seed)
    queries, rankings = [], []
    for i in range(n):
        queries.append(LabelledQuery(f"q{i}", [Gold(f"d{i}", 0)]))
        sides = {}
        for side, p in [("dense", 0.8)] + [(f"bm25@{w:g}", 0.3) for w in tuning.CONTEXT_WEIGHTS]:
            noise = [hit(f"x{i}-{side}-{j}", 0, 100 - j) for j in range(30)]  # past the top 20 graded
            if rng.random() < p:
                noise.insert(at, hit(f"d{i}", 0, 100.5 - at))
            sides[side] = noise
        rankings.append(sides)
    return queries, rankings


def test_tune_picks_the_stronger_side_and_grades_it_on_queries_it_did_not_see():
    queries, rankings = made_up()
    current = tuning.Setting("rrf", 0.5, 1.0)  # halves the strong side
    report = tuning.tune(queries, rankings, current, tuning.grid(has_contexts=True), folds=5)
    assert report.winner.dense_weight >= 1.0  # no longer halves the strong side
    assert len(report.held_out.per_query) == len(queries) and len(report.fold_winners) == 5
    assert report.held_out.pass_at[10] > report.current.pass_at[10] + 10
    # Held out can't beat the setting fitted on all the queries it is graded on.
    assert report.held_out.pass_at[10] <= report.winner_all.pass_at[10] + 1e-9
    summary = report.summary()
    assert summary["held_out_gain_pass@10"] > 10 and summary["winner"]["dense_weight"] >= 1.0


def test_tune_keeps_the_current_defaults_when_nothing_beats_them():
    queries, rankings = made_up()
    for sides in rankings:  # both sides see the same thing: every setting ties
        for key in list(sides):
            sides[key] = rankings[0]["dense"][:0] + sides["dense"]
    current = tuning.Setting("rrf", 1.0, 0.0)
    report = tuning.tune(queries, rankings, current, tuning.grid(has_contexts=False) + [current], folds=4)
    assert report.winner == current


def test_a_reranker_is_tried_with_every_setting_and_wins_only_when_it_helps():
    queries, rankings = made_up(n=30, at=12)  # found, but below the top 10 (30 queries: the grid is tried twice)
    for q, sides in zip(queries, rankings):
        gold = q.gold[0].doc_id
        # A reranker that knows the answer whenever either side found it.
        sides["rerank"] = {h["_id"]: (1.0 if h["_source"]["doc_id"] == gold else 0.0)
                           for hits in sides.values() for h in hits}
    current = tuning.Setting("rrf", 1.0, 1.0)
    grid = tuning.grid(has_contexts=True, reranker="voyage")
    assert len(grid) == 2 * len(tuning.grid(has_contexts=True))
    report = tuning.tune(queries, rankings, current, grid, folds=5)
    assert report.winner.reranker == "voyage" and "reranked by voyage" in report.winner.label()
    assert report.held_out.pass_at[5] > report.current.pass_at[5] + 30
    for sides in rankings:  # a reranker that knows nothing: ties keep the fused order, so no gain
        sides["rerank"] = {}
    report = tuning.tune(queries, rankings, current, grid, folds=5)
    assert report.winner.reranker == "none"
