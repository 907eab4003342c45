"""Retrieval evaluation on labelled queries: what contexts, BM25, fusion and reranking bring.

Metrics, for k = 5, 10, 20 (each query is searched once, at the largest k):

- Pass@k, the cookbook's: per query, the share of its golden chunks found in the top k,
  averaged over queries (x100). Every query weighs the same.
- Recall@k: golden chunks found in the top k over all golden chunks (x100). Every golden
  chunk weighs the same, so queries with many labels count more than in Pass@k.
- MRR@10: the mean of 1 / rank of the first golden chunk in the top 10 (0 if none).

Labels are chunk ids ``{"doc_id", "chunk"}`` (the cookbook's), passages ``{"doc_id", "text"}``
— found by a hit of the same document that contains at least ``TEXT_MATCH`` of the passage's
words, so users' labels survive a change of chunker — or pages ``{"doc_id", "page"}`` (1-based,
FinanceBench's): found by a hit of that document whose pages include it. Two more rates, for
every query set and printed for page labels (FinanceBench's metrics):

- page@k (``hit_at``): the share of queries with at least one golden label in the top k;
- doc@k: the share of queries with a hit from a golden document in the top k.

Queries may carry a group (``group``, or MMLongBench's ``doc_type``): every figure is then also
given per group (``EvalResult.by_group``), so that a gain on filings cannot hide a loss on manuals.
"""

from __future__ import annotations

import ast
import json
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.errors import QueryFileError

KS = (5, 10, 20)
MRR_K = 10
TEXT_MATCH = 0.5
_WORDS = re.compile(r"\w+")


@dataclass(frozen=True)
class Gold:
    doc_id: str
    chunk: int | None = None
    text: str | None = None
    page: int | None = None

    def words(self) -> set[str]:
        return set(_WORDS.findall((self.text or "").lower()))


@dataclass
class LabelledQuery:
    query: str
    gold: list[Gold]
    group: str | None = None  # the kind of document it asks about (a paper, a manual, a filing)
    source: str | None = None  # who wrote it: "person" (on the search page, by hand) or "generated" (a model)


@dataclass
class Retrieved:
    """One ranked result as the evaluation sees it."""

    doc_id: str
    chunk: int
    text: str = ""
    pages: list[int] | None = None  # [first, last]


@dataclass
class EvalResult:
    label: str
    queries: int
    pass_at: dict[int, float]
    recall_at: dict[int, float]
    mrr: float
    latency_ms_p50: float
    latency_ms_p95: float
    per_query: list[dict[str, Any]] = field(default_factory=list)
    hit_at: dict[int, float] = field(default_factory=dict)  # page@k for page labels
    doc_at: dict[int, float] = field(default_factory=dict)
    pages: bool = False  # the labels are pages

    def by_group(self) -> dict[str, EvalResult]:
        """The same figures over each group's queries (none when the queries carry no group)."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in self.per_query:
            if row.get("group") is not None:
                groups.setdefault(row["group"], []).append(row)
        return {name: summarize(f"{self.label} [{name}]", rows) for name, rows in sorted(groups.items())}

    def headline(self, k: int = 10) -> float:
        """page@k for page labels, else Pass@k."""
        return self.hit_at[k] if self.pages else self.pass_at[k]

    def summary(self) -> dict[str, Any]:
        out = {"config": self.label, "queries": self.queries,
               **{f"pass@{k}": round(self.pass_at[k], 2) for k in KS},
               **{f"recall@{k}": round(self.recall_at[k], 2) for k in KS},
               f"mrr@{MRR_K}": round(self.mrr, 4),
               "latency_ms_p50": round(self.latency_ms_p50, 1), "latency_ms_p95": round(self.latency_ms_p95, 1)}
        out.update({f"{'page' if self.pages else 'hit'}@{k}": round(v, 2) for k, v in self.hit_at.items()})
        out.update({f"doc@{k}": round(v, 2) for k, v in self.doc_at.items()})
        groups = self.by_group()
        if groups:
            out["groups"] = {name: {"queries": g.queries, **{f"{'page' if g.pages else 'pass'}@{k}": round(
                g.hit_at[k] if g.pages else g.pass_at[k], 2) for k in KS}} for name, g in groups.items()}
        return out


def load_queries(path: Path, fmt: str = "auto") -> list[LabelledQuery]:
    """``cookbook``: the cookbook's evaluation_set.jsonl (``golden_chunk_uuids``); ``jsonl``: one
    ``{"query": ..., "gold": [{"doc_id": ..., "chunk": n} | {"doc_id": ..., "text": ...} |
    {"doc_id": ..., "page": n}]}`` per line, with ``"source": "person" | "generated"`` when known
    (other fields are ignored: ``situate labels export``'s ``not_relevant`` among them); ``auto``
    (the default): each line's own keys decide. A question whose hits were all marked not
    relevant grades nothing and is skipped."""
    if fmt not in ("auto", "cookbook", "jsonl"):
        raise QueryFileError(f"unknown query format {fmt!r}: auto, cookbook or jsonl")
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            kind = fmt
            if kind == "auto":
                kind = ("cookbook" if isinstance(row, dict) and "golden_chunk_uuids" in row
                        else "jsonl" if isinstance(row, dict) and "gold" in row else "")
                if not kind:
                    raise QueryFileError(f"{path}:{number}: not a labelled query: a line has \"query\" with "
                                         "\"gold\" (situate labels export, jsonl) or \"golden_chunk_uuids\" (cookbook)")
            if kind == "cookbook":
                pairs = row["golden_chunk_uuids"]
                if isinstance(pairs, str):
                    pairs = ast.literal_eval(pairs)
                gold = [Gold(str(d), int(n)) for d, n in pairs]
            else:
                gold = [Gold(str(g["doc_id"]), int(g["chunk"])) if g.get("chunk") is not None
                        else Gold(str(g["doc_id"]), page=int(g["page"])) if g.get("page") is not None
                        else Gold(str(g["doc_id"]), text=str(g["text"])) for g in row["gold"]]
            query = str(row["query"])
            group = row.get("group", row.get("doc_type")) if kind == "jsonl" else None
            source = row.get("source") if kind == "jsonl" else None
        except QueryFileError:
            raise
        except (ValueError, KeyError, TypeError, SyntaxError) as e:
            raise QueryFileError(f"{path}:{number}: not a labelled query ({type(e).__name__}: {e})") from None
        if not gold and kind == "jsonl" and row.get("not_relevant"):
            continue
        if not gold:
            raise QueryFileError(f"{path}:{number}: a query needs at least one golden chunk")
        out.append(LabelledQuery(query, gold, None if group is None else str(group),
                                 None if source is None else str(source)))
    return out


def found_by(gold: Gold, hit: Retrieved) -> bool:
    if gold.doc_id != hit.doc_id:
        return False
    if gold.page is not None:
        return bool(hit.pages) and hit.pages is not None and hit.pages[0] <= gold.page <= hit.pages[-1]
    if gold.chunk is not None:
        return gold.chunk == hit.chunk
    wanted = gold.words()
    return bool(wanted) and len(wanted & set(_WORDS.findall(hit.text.lower()))) >= TEXT_MATCH * len(wanted)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def grade_query(q: LabelledQuery, ranked: list[Retrieved]) -> dict[str, Any]:
    """One query's row: the rank (1-based) at which each golden chunk is first found (None if
    not in the top 20), and its Pass@k."""
    first_rank = [next((i for i, hit in enumerate(ranked[:max(KS)], 1) if found_by(g, hit)), None) for g in q.gold]
    docs = {g.doc_id for g in q.gold}
    doc_rank = next((i for i, hit in enumerate(ranked[:max(KS)], 1) if hit.doc_id in docs), None)
    # ``cluster``: the document it asks about, whose questions rise and fall together (``significance``).
    row: dict[str, Any] = {"query": q.query, "gold_ranks": first_rank, "doc_rank": doc_rank,
                           "pages": any(g.page is not None for g in q.gold), "group": q.group,
                           "cluster": q.gold[0].doc_id, "source": q.source}
    for k in KS:
        row[f"pass@{k}"] = sum(1 for r in first_rank if r is not None and r <= k) / len(q.gold)
    return row


def summarize(label: str, rows: list[dict[str, Any]], latencies: list[float] | None = None) -> EvalResult:
    """Pass@k, Recall@k and MRR@10 of graded rows (``grade_query``)."""
    found = {k: sum(sum(1 for r in row["gold_ranks"] if r is not None and r <= k) for row in rows) for k in KS}
    gold = sum(len(row["gold_ranks"]) for row in rows)
    reciprocal = []
    for row in rows:
        best = min((r for r in row["gold_ranks"] if r is not None), default=None)
        reciprocal.append(1.0 / best if best is not None and best <= MRR_K else 0.0)
    latencies = latencies or []

    def share(ranks: list[int | None], k: int) -> float:
        return 100 * sum(1 for r in ranks if r is not None and r <= k) / len(ranks) if ranks else 0.0

    best = [min((r for r in row["gold_ranks"] if r is not None), default=None) for row in rows]
    return EvalResult(
        label, len(rows),
        {k: 100 * statistics.fmean(row[f"pass@{k}"] for row in rows) if rows else 0.0 for k in KS},
        {k: 100 * found[k] / gold if gold else 0.0 for k in KS},
        statistics.fmean(reciprocal) if reciprocal else 0.0,
        percentile(latencies, 0.5), percentile(latencies, 0.95), rows,
        hit_at={k: share(best, k) for k in KS}, doc_at={k: share([row.get("doc_rank") for row in rows], k) for k in KS},
        pages=any(row.get("pages") for row in rows))


def evaluate(queries: list[LabelledQuery], search: Callable[[str, int], list[Retrieved]],
             label: str = "hybrid") -> EvalResult:
    """``search(query, k)`` returns the ranked results of one configuration."""
    rows, latencies = [], []
    for q in queries:
        started = time.perf_counter()
        ranked = search(q.query, max(KS))
        latencies.append((time.perf_counter() - started) * 1000)
        rows.append(grade_query(q, ranked))
    return summarize(label, rows, latencies)


@dataclass
class Flip:
    query: str
    before: float
    after: float
    ranks_before: list[int | None]
    ranks_after: list[int | None]


def flips(before: EvalResult, after: EvalResult, k: int = 10) -> tuple[list[Flip], list[Flip]]:
    """Queries whose Pass@k changed from ``before`` to ``after``: (gained, lost), biggest first."""
    gained: list[Flip] = []
    lost: list[Flip] = []
    for a, b in zip(before.per_query, after.per_query):
        if a[f"pass@{k}"] == b[f"pass@{k}"]:
            continue
        flip = Flip(a["query"], a[f"pass@{k}"], b[f"pass@{k}"], a["gold_ranks"], b["gold_ranks"])
        (gained if flip.after > flip.before else lost).append(flip)
    def largest_first(f: Flip) -> float:
        return -abs(f.after - f.before)

    return sorted(gained, key=largest_first), sorted(lost, key=largest_first)


def group_rows(results: list[EvalResult], k: int = 10) -> list[dict[str, Any]]:
    """One row per group: its queries, then each configuration's headline at ``k`` (page@k or
    Pass@k) over that group's queries. Empty when the queries carry no group."""
    per = [(r.label, r.by_group()) for r in results]
    names = sorted({name for _, groups in per for name in groups})
    rows = []
    for name in names:
        row: dict[str, Any] = {"group": name, "queries": next(g[name].queries for _, g in per if name in g)}
        for label, groups in per:
            if name in groups:
                row[label] = round(groups[name].headline(k), 2)
        rows.append(row)
    return rows


def _ranks(ranks: list[int | None]) -> str:
    return ", ".join("—" if r is None else str(r) for r in ranks)


def markdown_report(results: list[EvalResult], compared: tuple[EvalResult, EvalResult] | None,
                    title: str, notes: list[str] | None = None, chart: str | None = None,
                    k: int = 10, show: int = 15) -> str:
    lines = [f"# {title}", ""]
    lines += notes or []
    if notes:
        lines.append("")
    paged = any(r.pages for r in results)
    head = ["configuration"] + ([f"page@{x}" for x in KS] + [f"doc@{x}" for x in KS] if paged else []) \
        + [f"Pass@{x}" for x in KS] + [f"Recall@{x}" for x in KS] + [f"MRR@{MRR_K}", "p50 ms"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r.label] + ([f"{r.hit_at[x]:.2f}" for x in KS] + [f"{r.doc_at[x]:.2f}" for x in KS] if paged else [])
        cells += [f"{r.pass_at[x]:.2f}" for x in KS] + [f"{r.recall_at[x]:.2f}" for x in KS]
        cells += [f"{r.mrr:.3f}", f"{r.latency_ms_p50:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    grouped = group_rows(results, k)
    if grouped:
        metric = "page" if paged else "Pass"
        lines += ["", f"### {metric}@{k} per group", "", "| " + " | ".join(grouped[0]) + " |", "|" + "---|" * len(grouped[0])]
        lines += ["| " + " | ".join(str(v) for v in row.values()) + " |" for row in grouped]
    if chart:
        lines += ["", f"![Pass@k per configuration]({chart})"]
    if compared:
        before, after = compared
        gained, lost = flips(before, after, k)
        failures = [100 - before.pass_at[20], 100 - after.pass_at[20]]
        change = (failures[1] - failures[0]) / failures[0] * 100 if failures[0] else 0.0
        lines += ["", f"## `{before.label}` → `{after.label}`", "",
                  f"Pass@{k}: {before.pass_at[k]:.2f} → {after.pass_at[k]:.2f} "
                  f"({after.pass_at[k] - before.pass_at[k]:+.2f}); top-20 failures {failures[0]:.1f}% → "
                  f"{failures[1]:.1f}% ({change:+.0f}%). {len(gained)} queries gained at @{k}, {len(lost)} lost.",
                  ""]
        from producers.evaluation import significance

        for subset, differences in significance.compare(before.per_query, after.per_query).items():
            if subset != "all":
                lines += [f"Questions labelled by {'a person' if subset == 'person' else 'a model'} alone:", ""]
            lines += [f"- {d.sentence()}" for d in differences] + [""]
        for name, group in (("Gained", gained), ("Lost", lost)):
            if not group:
                continue
            lines += [f"### {name} at @{k} (golden chunks' ranks before → after; — = beyond 20)", ""]
            for f in group[:show]:
                lines.append(f"- {f.query} — Pass@{k} {f.before:.2f} → {f.after:.2f}; ranks "
                             f"{_ranks(f.ranks_before)} → {_ranks(f.ranks_after)}")
            if len(group) > show:
                lines.append(f"- … and {len(group) - show} more (see the JSON output)")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def chart_png(results: list[EvalResult], path: Path, title: str) -> bool:
    """Grouped bars: Pass@5/10/20 for each configuration. False, and no file, without matplotlib
    (the ``report`` extra: a server or its image has no use for it)."""
    try:
        import matplotlib
    except ImportError:
        return False

    matplotlib.use("Agg")  # no display; never a window
    import matplotlib.pyplot as plt

    width = 0.8 / len(KS)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(results) + 2), 4.2), dpi=120)
    for i, k in enumerate(KS):
        xs = [j + (i - (len(KS) - 1) / 2) * width for j in range(len(results))]
        bars = ax.bar(xs, [r.pass_at[k] for r in results], width, label=f"Pass@{k}")
        ax.bar_label(bars, fmt="%.1f", fontsize=6, padding=1)
    ax.set_xticks(range(len(results)), [r.label for r in results], rotation=20, ha="right", fontsize=8)
    low = min(min(r.pass_at.values()) for r in results) if results else 0
    ax.set_ylim(max(0, low - 10), 107)  # headroom for the legend above the bars
    ax.set_ylabel("Pass@k (%)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", ncol=len(KS), frameon=False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
