"""Differences told from noise: paired, clustered by document, with how many questions a
difference of that size would need."""

from __future__ import annotations

import random

from producers.evaluation import significance


def test_a_one_question_difference_in_thirty_is_within_the_noise() -> None:
    before = [1.0] * 20 + [0.0] * 10
    after = before[:]
    after[25] = 1.0  # one question more found: +3.3 points
    d = significance.paired("Pass@10", before, after, [f"doc{i}" for i in range(30)])
    assert round(d.difference, 2) == 3.33 and d.within_noise
    assert d.questions_needed and d.questions_needed > 100
    assert "within the noise" in d.sentence() and "documents (236 questions) to be told from noise" in d.sentence()


def test_a_large_consistent_gain_is_more_than_noise() -> None:
    rng = random.Random(1)
    before = [float(rng.random() < 0.5) for _ in range(200)]
    after = [1.0 if b or rng.random() < 0.6 else 0.0 for b in before]
    d = significance.paired("Pass@10", before, after, [f"doc{i // 2}" for i in range(200)])
    assert d.low > 0 and not d.within_noise and "more than noise" in d.sentence()


def test_questions_about_one_document_widen_the_interval() -> None:
    """Twenty questions about one document that all flip together are one piece of evidence, not
    twenty: clustered, the interval is wider than if they were independent."""
    before = [0.0] * 40 + [1.0] * 40
    after = [1.0] * 20 + [0.0] * 20 + [1.0] * 40
    independent = significance.paired("Pass@10", before, after, [f"q{i}" for i in range(80)])
    clustered = significance.paired("Pass@10", before, after, ["big"] * 20 + [f"q{i}" for i in range(20, 80)])
    assert clustered.difference == independent.difference
    assert clustered.high - clustered.low > 2 * (independent.high - independent.low)
    assert clustered.design_effect > 5 and clustered.questions_needed > independent.questions_needed


def test_no_difference_needs_no_questions_and_the_report_is_the_same_each_time() -> None:
    scores = [1.0, 0.0, 1.0, 1.0]
    same = significance.paired("MRR@10", scores, scores, ["a", "a", "b", "c"], scale=1.0)
    assert same.difference == 0 and same.within_noise and same.questions_needed is None
    runs = {significance.paired("Pass@10", [0.0, 1, 0, 1], [1.0, 1, 1, 0], ["a", "b", "c", "d"]).low for _ in range(3)}
    assert len(runs) == 1


def null_evaluation(rng: random.Random, documents: int) -> significance.Difference:
    """Two configurations with no true difference: documents of varied difficulty (some nearly
    always found, some nearly never), 2 to 12 questions each, and a per-document quirk shared
    by both sides, so the questions of one document move together."""
    before: list[float] = []
    after: list[float] = []
    clusters: list[str] = []
    for doc in range(documents):
        difficulty = rng.betavariate(0.7, 0.7)
        for _ in range(rng.randint(2, 12)):
            p = min(1.0, max(0.0, difficulty + rng.gauss(0, 0.15)))
            before.append(float(rng.random() < p))
            after.append(float(rng.random() < p))
            clusters.append(f"d{doc}")
    return significance.paired("Pass@10", before, after, clusters)


def test_no_true_difference_is_called_real_at_most_about_five_times_in_a_hundred() -> None:
    """The interval's promise, checked under the null: 2,000 evaluations at each size."""
    rng = random.Random(7)
    rates = {}
    for documents in (3, 5, 10, 30):
        called = sum(not null_evaluation(rng, documents).within_noise for _ in range(2000))
        rates[documents] = called / 2000
    print("false 'more than noise' rate by documents:", rates)
    assert all(rate <= 0.06 for docs, rate in rates.items() if docs >= 5), rates
    assert rates[3] <= 0.07, rates


def test_one_document_is_too_few_to_tell() -> None:
    before, after = [0.0] * 7, [1.0, 1, 0, 0, 0, 0, 0]
    d = significance.paired("Pass@10", before, after, ["only"] * 7)
    assert d.too_few_documents and d.within_noise and "too few documents to tell" in d.sentence()
    assert d.to_json()["too_few_documents"] is True


def test_person_and_generated_labels_are_compared_apart() -> None:
    def row(found: bool, source: str, doc: str) -> dict:
        ranks = [1] if found else [None]
        return {"query": f"{source}{doc}", "gold_ranks": ranks, "doc_rank": ranks[0], "pages": False,
                "pass@5": float(found), "pass@10": float(found), "pass@20": float(found), "cluster": doc,
                "source": source}

    before = [row(False, "person", f"d{i}") for i in range(10)] + [row(False, "generated", f"d{i}") for i in range(10)]
    after = [row(True, "person", f"d{i}") for i in range(10)] + [row(False, "generated", f"d{i}") for i in range(10)]
    found = significance.compare(before, after)
    assert set(found) == {"all", "person", "generated"}
    pass10 = {subset: next(d for d in ds if d.metric == "Pass@10") for subset, ds in found.items()}
    assert pass10["person"].difference == 100 and pass10["generated"].difference == 0
    assert pass10["all"].difference == 50
