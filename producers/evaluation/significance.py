"""Whether a difference between two configurations is more than noise.

With 30 questions, one question is 3.3 points of recall: two figures side by side say little. The
questions are the same for both configurations, so the difference is taken question by question
(paired), and questions asked about one document are not independent — a document that one
configuration reads well lifts all of its questions at once — so the interval is clustered by
document (Miller, "Adding Error Bars to Evals", arXiv 2411.00640): a bootstrap that resamples whole
documents, with their questions, and reads the 2.5th and 97.5th percentiles of the mean difference.
A seeded generator makes a report the same every time it is printed.

From the same resamples: the design effect (how much wider clustering makes the interval than
independent questions would) and how many questions a difference of the size seen would need to
be told from noise at the usual 5% level with 80% power.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass
from typing import Any

RESAMPLES = 2000
Z_95, Z_POWER_80 = 1.959964, 0.841621


@dataclass(frozen=True)
class Difference:
    metric: str
    before: float          # the configurations' means over the questions (x100 for shares)
    after: float
    difference: float      # after - before
    low: float             # the 95% interval of the difference
    high: float
    questions: int
    clusters: int          # documents the questions are about
    design_effect: float   # the clustered variance over the independent one
    questions_needed: int | None  # for this difference to be told from noise (None: no difference)

    @property
    def within_noise(self) -> bool:
        return self.low <= 0 <= self.high

    def sentence(self) -> str:
        size = f"{self.difference:+.2f} (95% interval {self.low:+.2f} to {self.high:+.2f})"
        where = f"{self.questions} questions on {self.clusters} documents"
        if self.within_noise:
            need = (f"; a difference this size needs about {self.questions_needed:,} questions to be told from noise"
                    if self.questions_needed else "")
            return f"{self.metric}: {size} — within the noise on {where}{need}"
        return f"{self.metric}: {size} — more than noise on {where}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "within_noise": self.within_noise}


def paired(metric: str, before: list[float], after: list[float], clusters: list[str], scale: float = 100.0,
           seed: int = 0) -> Difference:
    """The paired difference of one metric's per-question scores (same questions, same order),
    with its interval clustered by ``clusters`` (each question's document)."""
    if not (len(before) == len(after) == len(clusters)) or not before:
        raise ValueError("paired scores need the same questions on both sides")
    diffs = [(b - a) * scale for a, b in zip(before, after)]
    n = len(diffs)
    mean = statistics.fmean(diffs)
    groups: dict[str, list[float]] = {}
    for d, c in zip(diffs, clusters):
        groups.setdefault(c, []).append(d)
    sums = [(sum(g), len(g)) for g in groups.values()]
    rng = random.Random(seed)
    means = []
    for _ in range(RESAMPLES):
        total = count = 0.0
        for _ in range(len(sums)):
            s, k = sums[rng.randrange(len(sums))]
            total += s
            count += k
        means.append(total / count)
    means.sort()
    low, high = means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]
    sd = statistics.stdev(diffs) if n > 1 else 0.0
    se_clustered = statistics.stdev(means)
    se_independent = sd / math.sqrt(n) if n else 0.0
    effect = (se_clustered / se_independent) ** 2 if se_independent else 1.0
    needed = None
    if abs(mean) > 1e-9 and sd > 0:
        needed = math.ceil(max(1.0, effect) * ((Z_95 + Z_POWER_80) * sd / abs(mean)) ** 2)
    return Difference(metric, statistics.fmean(before) * scale, statistics.fmean(after) * scale, mean, low, high, n,
                      len(groups), round(effect, 3), needed)


def per_question(rows: list[dict[str, Any]], metric: str) -> list[float]:
    """One metric's score for each graded question (``evaluate.grade_query``'s rows): ``pass@k``,
    ``page@k`` (a gold label in the top k: 1 or 0), ``doc@k``, ``mrr@10``."""
    name, _, k = metric.partition("@")
    cut = int(k) if k else 10
    if name == "pass":
        return [float(r[f"pass@{cut}"]) for r in rows]
    if name == "page":
        return [float(any(x is not None and x <= cut for x in r["gold_ranks"])) for r in rows]
    if name == "doc":
        return [float(r.get("doc_rank") is not None and r["doc_rank"] <= cut) for r in rows]
    if name == "mrr":
        return [1.0 / best if (best := min((x for x in r["gold_ranks"] if x is not None), default=None)) and best <= cut
                else 0.0 for r in rows]
    raise ValueError(f"unknown metric {metric!r}")


def metrics_for(rows: list[dict[str, Any]]) -> list[str]:
    """What to compare: page and document hits for page labels, Pass@k for chunk labels; MRR@10."""
    if any(r.get("pages") for r in rows):
        return ["page@5", "page@10", "page@20", "doc@10", "mrr@10"]
    return ["pass@5", "pass@10", "pass@20", "mrr@10"]


def compare(before_rows: list[dict[str, Any]], after_rows: list[dict[str, Any]]) -> dict[str, list[Difference]]:
    """Every metric's paired difference, for all questions and, when both kinds are present, for
    the questions a person labelled and the generated ones apart (generated ones overstate
    absolute scores but rank systems fairly well: they are never pooled with a person's silently)."""
    subsets: dict[str, list[int]] = {"all": list(range(len(before_rows)))}
    sources = {r.get("source") for r in before_rows}
    if {"person", "generated"} <= sources:
        for source in ("person", "generated"):
            subsets[source] = [i for i, r in enumerate(before_rows) if r.get("source") == source]
    out: dict[str, list[Difference]] = {}
    for name, index in subsets.items():
        b, a = [before_rows[i] for i in index], [after_rows[i] for i in index]
        clusters = [str(r.get("cluster") or r["query"]) for r in b]
        out[name] = [paired(m.replace("mrr", "MRR").replace("pass", "Pass"), per_question(b, m), per_question(a, m),
                            clusters, scale=1.0 if m.startswith("mrr") else 100.0) for m in metrics_for(b)]
    return out
