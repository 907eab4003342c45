"""The state of the whole pipeline right now, read from Redis and OpenSearch in one place.

``/metrics``, ``/dashboard`` and ``situate status`` show the same figures because they all
come from here: documents by state, chunks indexed, queue depth and the age of each queue's
oldest message, unacknowledged deliveries, workers online, and the LLM bill (``usage``, whose
totals ``situate stats`` prints) with the cache-read ratio beside the best possible.
"""

from __future__ import annotations

import time
from typing import Any

from workers import metrics
from workers.contextualizers.llm import usage
from workers.pipeline.routing import all_queues, oldest_waiting_s, sublists
from workers.storage import broker, catalog, chunk_index, fairqueue, presence, states


def queues(now: float | None = None) -> dict[str, dict[str, Any]]:
    """Per queue: messages waiting in Celery's queue (all priority sub-lists, and each), the
    oldest one's age, the work parked behind it in the collections' lines (``fairqueue``), the
    deliveries workers hold, and the ``backlog``: the three together."""
    now = now or time.time()
    out = {}
    names_of = all_queues()
    parked = fairqueue.parked(names_of, now)
    held = broker.unacked_by_queue()
    for q in names_of:
        names = sublists(q)
        by_list = dict(zip(names, broker.lengths(names)))
        oldest = [age for age in (oldest_waiting_s(q, now), parked[q]["oldest_s"]) if age is not None]
        out[q] = {**_backlog_row(sum(by_list.values()), parked[q]["parked"], held.get(q, 0)),
                  "by_priority_list": {k: v for k, v in by_list.items() if v},
                  "parked_by_collection": parked[q]["by_collection"], "oldest_s": max(oldest) if oldest else None}
    return out


def _backlog_row(waiting: int, parked: int, unacked: int) -> dict[str, int]:
    return {"waiting": waiting, "parked": parked, "unacked": unacked, "backlog": waiting + parked + unacked}


def backlog(names: list[str]) -> dict[str, Any]:
    """What an autoscaler reads for a kind of worker (``GET /v1/backlog``): per queue, messages
    waiting in every priority list, work parked in the collections' lines, and deliveries
    workers hold, prefetched ones included; ``backlog``, their sum over ``names``.

    All three, because each alone misleads: Kombu splits a queue into a list per priority level,
    so one list can look empty while another is full; fair shares keep a queue a few messages
    deep however much is parked behind it; and messages a worker prefetched are in no list. A
    scaler that reads one list sees nothing and removes the workers doing the work."""
    parked = fairqueue.parked(names)
    held = broker.unacked_by_queue()
    rows = {q: _backlog_row(sum(broker.lengths(sublists(q))), parked[q]["parked"], held.get(q, 0)) for q in names}
    return {"queues": rows, "backlog": sum(row["backlog"] for row in rows.values())}


def unacked(now: float | None = None) -> dict[str, Any]:
    """Deliveries held by workers. Their time is moved to now by the holder's heartbeat, so the
    oldest age stays under a heartbeat or two while every holder lives: a larger one is a dead
    worker's messages, waiting for the sweep."""
    return broker.unacked_summary(now)


def collections() -> list[dict[str, Any]]:
    rows = []
    for name in catalog.list_names():
        config = catalog.find(name)
        if config is None:
            continue
        try:
            chunks: int | None = chunk_index.count(config)
        except Exception:  # index missing or node down: the rest still answers
            chunks = None
        rows.append({"collection": name, "documents": states.counts(name), "chunks_indexed": chunks,
                     "contextualizer": config.contextualizer, "model": config.model or None,
                     "embedder": config.embedder, "model_status": model_status(config, chunks),
                     "reindex": (catalog.reindex_record(name) or {}).get("phase")})
    return rows


def model_status(config: catalog.CollectionConfig, chunks: int | None) -> dict[str, Any] | None:
    """For a collection whose model is deprecated or retired: what, the command that moves it to
    the current default model, and about what that costs (``usage.repriced``)."""
    from workers import lifecycle, models

    if not lifecycle.has_model_lifecycle(config):
        return None
    try:
        status, note = models.lifecycle_note(models.get(config.model))
    except ValueError:
        return {"status": "unknown", "note": f"{config.model} is not in the model table", "command": None,
                "estimate_usd": None}
    if status == "active":
        return None
    target = models.DEFAULT_MODEL
    return {"status": status, "note": note, "target": target,
            "command": f"situate reindex -c {config.name} --model {target}",
            "estimate_usd": usage.repriced(config.name, config.model, target, chunks or 0)}


def bill(names: list[str]) -> dict[str, Any]:
    """``situate stats --json``'s totals: all collections, then each."""
    return {"all": usage.totals(None), "collections": {n: usage.totals(n) for n in names}}


def by_model(counters: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Tokens, cost and cache ratios per (collection, model), from the metrics counters."""
    counters = counters if counters is not None else metrics.read_counters()
    rows: dict[tuple[str, str], dict[str, float]] = {}

    def row(labels: dict[str, Any]) -> dict[str, float]:
        return rows.setdefault((labels.get("collection", ""), labels.get("model", "")),
                               {"input": 0, "cache_write": 0, "cache_read": 0, "output": 0, "calls": 0,
                                "cost_usd": 0.0, "best_read": 0, "unreported_calls": 0})

    for labels, value in counters.get("llm_tokens", []):
        row(labels)[labels["kind"]] += value
    for name, field in (("llm_calls", "calls"), ("llm_cost_usd", "cost_usd"), ("llm_best_read_tokens", "best_read"),
                        ("llm_cache_unreported_calls", "unreported_calls")):
        for labels, value in counters.get(name, []):
            row(labels)[field] += value
    out = {}
    for (collection, model), r in rows.items():
        prompt = r["input"] + r["cache_write"] + r["cache_read"]
        reported = not (r["calls"] and r["unreported_calls"] >= r["calls"])  # a server that never said
        out[f"{collection}|{model}"] = {"collection": collection, "model": model, **r,
                                        "cache_read_ratio": (r["cache_read"] / prompt if prompt else 0.0) if reported else None,
                                        "best_read_ratio": min(1.0, r["best_read"] / prompt) if prompt else 0.0}
    return out


def replicas() -> dict[str, dict[str, Any]]:
    """The replicas of the servers of your own, as ``situate stats`` shows them (``usage.replicas``)."""
    return usage.replicas()


def replica_lists() -> dict[str, list[str]]:
    """The lists of replicas the workers announced in the last minutes, by fingerprint: one when
    they agree on the fleet."""
    from workers.storage import replicas as replica_state

    return replica_state.lists()


def snapshot(counters: dict[str, Any] | None = None) -> dict[str, Any]:
    """``counters``: the metrics counters, if the caller has read them already."""
    now = time.time()
    rows = collections()
    return {"at": now, "collections": rows, "queues": queues(now), "unacked": unacked(now),
            "workers": presence.online(), "bill": bill([r["collection"] for r in rows]),
            "by_model": by_model(counters)}
