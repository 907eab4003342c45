"""Retrieval evaluation on labelled queries: Pass@k, as the cookbook defines it.

Pass@k = for each query, the share of its golden chunks found in the top k, averaged over
queries (x100). Labels are (doc_id, chunk number) pairs. Each query is searched once at the
largest k, so the figures for smaller k come from the same ranking.
"""

from __future__ import annotations

import ast
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

KS = (5, 10, 20)


@dataclass
class LabelledQuery:
    query: str
    gold: set[tuple[str, int]]


@dataclass
class EvalResult:
    mode: str
    queries: int
    pass_at: dict[int, float]
    latency_ms_p50: float
    latency_ms_p95: float
    per_query: list[dict[str, Any]] = field(default_factory=list)


def load_queries(path: Path, fmt: str = "cookbook") -> list[LabelledQuery]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if fmt == "cookbook":
            pairs = row["golden_chunk_uuids"]
            if isinstance(pairs, str):
                pairs = ast.literal_eval(pairs)
            gold = {(str(d), int(n)) for d, n in pairs}
        else:
            gold = {(str(g["doc_id"]), int(g["chunk"])) for g in row["gold"]}
        out.append(LabelledQuery(row["query"], gold))
    return out


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def evaluate(queries: list[LabelledQuery], search: Callable[[str, int], list[tuple[str, int]]],
             mode: str = "hybrid") -> EvalResult:
    """``search(query, k)`` returns ranked (doc_id, chunk) pairs."""
    k_max = max(KS)
    scores = {k: [] for k in KS}
    latencies, per_query = [], []
    for q in queries:
        started = time.perf_counter()
        ranked = search(q.query, k_max)
        latencies.append((time.perf_counter() - started) * 1000)
        row = {"query": q.query}
        for k in KS:
            found = len(q.gold & set(ranked[:k])) / len(q.gold)
            scores[k].append(found)
            row[f"pass@{k}"] = found
        per_query.append(row)
    return EvalResult(mode, len(queries), {k: 100 * statistics.fmean(v) for k, v in scores.items()},
                      percentile(latencies, 0.5), percentile(latencies, 0.95), per_query)
