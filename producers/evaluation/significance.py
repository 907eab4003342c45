"""Whether a difference between two configurations is more than noise.

With 30 questions, one question is 3.3 points of recall: two figures side by side say little. The
questions are the same for both configurations, so the difference is taken question by question
(paired), and questions asked about one document are not independent — a document that one
configuration reads well lifts all of its questions at once — so the interval is clustered by
document (Miller, "Adding Error Bars to Evals", arXiv 2411.00640).

The interval is the mean difference ± t × a cluster-robust standard error: CR2 (Bell & McCaffrey
2002), whose residuals are corrected for the share of the questions each document holds, with a
t distribution on (documents − 1) degrees of freedom. The percentile bootstrap over documents
used before has nothing to resample with one document (an interval of no width) and is too
narrow with a few, calling differences real more often than a 95% interval promises (Cameron,
Gelbach & Miller 2008 on few clusters; docs/retrieval.md has both methods' rates, simulated).
Below ``MIN_DOCUMENTS`` no method keeps that promise usefully: the verdict is "too few documents
to tell". ``tests/unit/test_significance.py`` simulates the null and holds the rate near 5%.

Also: the design effect (how much wider clustering makes the interval than independent questions
would), and how many documents — and questions, at this many a document — a difference of the
size seen would need to be told from noise at the 5% level with 80% power. More questions on the
same documents cannot beat the variance between documents: the documents are the unit.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

Z_95, Z_POWER_80 = 1.959964, 0.841621
MIN_DOCUMENTS = 3  # fewer: "too few documents to tell", never a verdict
# The t distribution's 97.5th percentile for 1..30 degrees of freedom; beyond, a Cornish-Fisher
# expansion around the normal's (within 0.001 from 30 on).
T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
         2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t_975(df: int) -> float:
    if df <= len(T_975):
        return T_975[max(1, df) - 1]
    z = Z_95
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


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
    documents_needed: int | None = None  # the same, in documents (at this many questions a document)

    @property
    def too_few_documents(self) -> bool:
        return self.clusters < MIN_DOCUMENTS

    @property
    def within_noise(self) -> bool:
        return self.too_few_documents or self.low <= 0 <= self.high

    def sentence(self) -> str:
        where = f"{self.questions} questions on {self.clusters} documents"
        if self.too_few_documents:
            return (f"{self.metric}: {self.difference:+.2f} — too few documents to tell ({where}; "
                    f"at least {MIN_DOCUMENTS} are needed for an interval that holds)")
        size = f"{self.difference:+.2f} (95% interval {self.low:+.2f} to {self.high:+.2f})"
        if self.within_noise:
            need = (f"; a difference this size needs about {self.documents_needed:,} documents "
                    f"({self.questions_needed:,} questions) to be told from noise"
                    if self.questions_needed and self.documents_needed else "")
            return f"{self.metric}: {size} — within the noise on {where}{need}"
        return f"{self.metric}: {size} — more than noise on {where}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "within_noise": self.within_noise, "too_few_documents": self.too_few_documents}


def paired(metric: str, before: list[float], after: list[float], clusters: list[str], scale: float = 100.0) -> Difference:
    """The paired difference of one metric's per-question scores (same questions, same order),
    with its interval clustered by ``clusters`` (each question's document): CR2 with t on
    (documents - 1) degrees of freedom."""
    if not (len(before) == len(after) == len(clusters)) or not before:
        raise ValueError("paired scores need the same questions on both sides")
    diffs = [(b - a) * scale for a, b in zip(before, after)]
    n = len(diffs)
    mean = statistics.fmean(diffs)
    groups: dict[str, list[float]] = {}
    for d, c in zip(diffs, clusters):
        groups.setdefault(c, []).append(d - mean)
    g = len(groups)
    # The mean is a regression on a constant: a document's block of the hat matrix is J/n, so
    # CR2's correction (I - H_gg)^(-1/2) scales the document's residual sum by 1/sqrt(1 - n_g/n).
    variance = sum(sum(r) ** 2 / (1 - len(r) / n) for r in groups.values() if len(r) < n) / n ** 2
    se = math.sqrt(variance)
    half = t_975(g - 1) * se if g > 1 else 0.0
    sd = statistics.stdev(diffs) if n > 1 else 0.0
    se_independent = sd / math.sqrt(n) if n else 0.0
    effect = variance / se_independent ** 2 if se_independent else 1.0
    questions_needed = documents_needed = None
    if abs(mean) > 1e-9 and se > 0:
        # se shrinks as 1/sqrt(documents): the documents needed for |mean| = (t + z_power) se.
        documents_needed = max(g + 1, math.ceil(g * ((Z_95 + Z_POWER_80) * se / abs(mean)) ** 2))
        questions_needed = math.ceil(documents_needed * n / g)
    return Difference(metric, statistics.fmean(before) * scale, statistics.fmean(after) * scale, mean, mean - half,
                      mean + half, n, g, round(effect, 3), questions_needed, documents_needed)


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
