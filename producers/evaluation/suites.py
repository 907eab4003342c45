"""Evaluating on several corpora at once, so a change is judged on all of them, never on one.

A suites file (YAML) names, per corpus, its labelled queries and its collections by role:

    cookbook:
      queries: ../shared/data/cookbook/evaluation_set.jsonl
      format: cookbook
      collections: {plain: cookbook-plain, default: cookbook}
    tech_faq_en:
      queries: ../shared/data/tech_faq_en/evaluation_set.jsonl
      format: cookbook
      collections: {plain: faq-plain, default: faq}

Each corpus gets its table (role:mode rows); the summary has one row per role:mode with
each corpus's headline at 10 and the mean over corpora at 5, 10, 20 — the row a change must
move up everywhere, not on average only. The headline is Pass@k, or page@k for a corpus
labelled by pages (FinanceBench: ``format: jsonl`` with ``{"doc_id", "page"}`` gold), whose
table also shows doc@k.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from producers.evaluation import significance
from producers.evaluation.evaluate import KS, EvalResult, LabelledQuery, group_rows, load_queries
from producers.evaluation.significance import Difference
from workers.errors import QueryFileError


@dataclass
class Suite:
    name: str
    queries: list[LabelledQuery]
    collections: dict[str, str]          # role -> collection
    source: Path
    results: list[EvalResult] = field(default_factory=list)


def load_suites(path: Path) -> list[Suite]:
    try:
        spec = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise QueryFileError(f"{path}: not YAML ({e})") from None
    if not isinstance(spec, dict) or not spec:
        raise QueryFileError(f"{path}: expected a mapping of corpus name -> queries, format, collections")
    suites = []
    for name, entry in spec.items():
        if not isinstance(entry, dict) or "queries" not in entry or not isinstance(entry.get("collections"), dict):
            raise QueryFileError(f"{path}: corpus {name!r} needs 'queries' and 'collections' (role: collection)")
        queries = (path.parent / entry["queries"]).resolve()
        suites.append(Suite(str(name), load_queries(queries, entry.get("format", "auto")),
                            {str(role): str(c) for role, c in entry["collections"].items()}, queries))
    return suites


def run(suites: list[Suite], evaluate_one: Callable[[Suite, str, str], list[EvalResult]]) -> None:
    """``evaluate_one(suite, role, collection)`` -> that collection's results, labelled
    ``role:mode``; kept on each suite."""
    for suite in suites:
        suite.results = [r for role, collection in suite.collections.items() for r in evaluate_one(suite, role, collection)]


def headline(result: EvalResult, k: int) -> float:
    """Pass@k, or page@k where the labels are pages."""
    return result.hit_at[k] if result.pages else result.pass_at[k]


def summary(suites: list[Suite]) -> list[dict[str, Any]]:
    """One row per label present in every suite: per-corpus headline at 10 and their means."""
    labels = [r.label for r in suites[0].results if all(r.label in {x.label for x in s.results} for s in suites)]
    rows = []
    for label in labels:
        per = {s.name: next(r for r in s.results if r.label == label) for s in suites}
        rows.append({"config": label,
                     **{f"{name} {'page' if r.pages else 'pass'}@10": round(headline(r, 10), 2) for name, r in per.items()},
                     **{f"mean @{k}": round(statistics.fmean(headline(r, k) for r in per.values()), 2) for k in KS}})
    return rows


def differences(suite: Suite, mode: str = "hybrid") -> list[tuple[str, str, dict[str, list[Difference]]]]:
    """Each role's ``mode`` against the first role's (plain chunks, as the suites put them): the
    paired differences with their intervals (``significance``)."""
    by_label = {r.label: r for r in suite.results}
    roles = list(suite.collections)
    base = by_label.get(f"{roles[0]}:{mode}") if roles else None
    if base is None:
        return []
    return [(base.label, other.label, significance.compare(base.per_query, other.per_query))
            for role in roles[1:] if (other := by_label.get(f"{role}:{mode}")) is not None]


def markdown(suites: list[Suite], title: str) -> str:
    lines = [f"# {title}", ""]
    for s in suites:
        paged = any(r.pages for r in s.results)
        extra = [f"page@{k}" for k in KS] + [f"doc@{k}" for k in KS] if paged else []
        head = ["configuration", *extra, *[f"Pass@{k}" for k in KS], *[f"Recall@{k}" for k in KS], "MRR@10"]
        lines += [f"## {s.name} ({len(s.queries)} queries)", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in s.results:
            cells = ([f"{r.hit_at[k]:.2f}" for k in KS] + [f"{r.doc_at[k]:.2f}" for k in KS] if paged else []) \
                + [f"{r.pass_at[k]:.2f}" for k in KS] + [f"{r.recall_at[k]:.2f}" for k in KS] + [f"{r.mrr:.3f}"]
            lines.append(f"| {r.label} | " + " | ".join(cells) + " |")
        grouped = group_rows(s.results)
        if grouped:
            lines += ["", f"{'page' if paged else 'Pass'}@10 per group:", "", "| " + " | ".join(grouped[0]) + " |",
                      "|" + "---|" * len(grouped[0])]
            lines += ["| " + " | ".join(str(v) for v in row.values()) + " |" for row in grouped]
        for before, after, found in differences(s):
            lines += ["", f"`{before}` → `{after}` (paired, clustered by document):", ""]
            for subset, ds in found.items():
                prefix = "" if subset == "all" else f"({subset}) "
                lines += [f"- {prefix}{d.sentence()}" for d in ds]
        lines.append("")
    rows = summary(suites)
    if rows:
        head = list(rows[0])
        lines += ["## Summary", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(str(row[h]) for h in head) + " |" for row in rows]
    return "\n".join(lines).rstrip() + "\n"
