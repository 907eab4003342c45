"""``GET /metrics``: the fleet's figures in Prometheus's text format, names ``situate_*``.

The workers' counters and histograms come from Redis (``workers.metrics``), gauges from a
live ``fleet.snapshot()``: one scrape of the API sees every worker, including those an
autoscaler has already stopped. This API process's own requests are counted in memory (each
API replica is a scrape target of its own, labelled by Prometheus's ``instance``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from producers.web import fleet
from workers import metrics
from workers.connections import opensearch_client

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# name in Redis -> (Prometheus name, help, label names)
COUNTERS = {
    "documents_indexed": ("situate_documents_indexed", "Documents indexed (a new version counts again).",
                          ["collection"]),
    "chunks_indexed": ("situate_chunks_indexed", "Chunks written to the index.", ["collection"]),
    "llm_calls": ("situate_llm_calls", "LLM calls answered.", ["collection", "model"]),
    "llm_tokens": ("situate_llm_tokens", "LLM tokens by kind: input, cache_write, cache_read, output.",
                   ["collection", "model", "kind"]),
    "llm_cost_usd": ("situate_llm_cost_usd", "What the LLM calls cost, in US dollars.", ["collection", "model"]),
    "llm_replica_calls": ("situate_llm_replica_calls", "Calls a replica of your own servers answered.", ["replica"]),
    "llm_replica_tokens": ("situate_llm_replica_tokens", "A replica's prompt tokens by kind: input (computed), "
                           "cache_read (read from its prefix cache, where it says).", ["replica", "kind"]),
    "llm_replica_seconds": ("situate_llm_replica_seconds", "Time in a replica's calls, request to answer.", ["replica"]),
    "llm_replica_down": ("situate_llm_replica_down", "Times a replica was set aside (a refused connection, a "
                         "timeout).", ["replica"]),
    "llm_replica_calls_around": ("situate_llm_replica_calls_around", "Calls of a document placed on this replica "
                                 "that went elsewhere: their worker does not list it (the workers' lists differ).",
                                 ["replica"]),
    "llm_replica_leases_lapsed": ("situate_llm_replica_leases_lapsed", "Calls whose place on a replica lapsed before "
                                  "they ended (their worker could not renew it).", ["replica"]),
    "llm_cache_unreported_calls": ("situate_llm_cache_unreported_calls", "Calls whose server said nothing of its "
                                   "cache (their reads are unknown).", ["collection", "model"]),
    "llm_best_read_tokens": ("situate_llm_best_read_tokens",
                             "Cache reads the same calls could have had at best.", ["collection", "model"]),
    "llm_faults": ("situate_llm_faults", "LLM provider faults (kind: connection, timeout, http_408, http_429, "
                   "http_529, http_5xx); each is retried until the attempts or the patience run out.",
                   ["collection", "model", "kind"]),
    "provider_faults": ("situate_provider_faults", "Transient faults of the other calls out of the process "
                        "(provider: voyage, voyage-context, bedrock, cohere, s3; kind as llm_faults), each retried "
                        "in place.", ["provider", "kind"]),
    "reconciled": ("situate_reconciled", "Documents the reconciler sent on again: in flight, not moving, and no "
                   "message anywhere (stage: the task sent).", ["stage"]),
    "index_write_blocked": ("situate_index_write_blocked", "Index writes that met a block (a full disk: "
                            "OpenSearch's flood-stage watermark, or an operator's write block); retried.",
                            ["collection"]),
    "checkpoints_unconfirmed": ("situate_checkpoints_unconfirmed", "Contexts a replica did not confirm within "
                                "a second (WAIT 1): on the master alone, paid again if it fails over before "
                                "passing them on.", []),
    "stage_transient_retries": ("situate_stage_transient_retries",
                                "A stage run again in place: Redis, OpenSearch or the broker unreachable.",
                                ["stage"]),
}
HISTOGRAMS = {
    "stage_seconds": ("situate_stage_seconds", "How long a stage task ran (outcome: done or failed).",
                      ["stage", "outcome"]),
    "llm_call_seconds": ("situate_llm_call_seconds", "One provider call, request to full answer.", ["model"]),
    "llm_first_token_seconds": ("situate_llm_first_token_seconds",
                                "Time to first token of a streamed call (a document's warm-up call).", ["model"]),
}


class FleetCollector:
    def collect(self) -> Iterator[Metric]:
        counters = metrics.read_counters()
        for name, (prom, help_, labels) in COUNTERS.items():
            family = CounterMetricFamily(prom, help_, labels=labels)
            for values, value in counters.get(name, []):
                family.add_metric([values.get(label, "") for label in labels], value)
            yield family
        stored = metrics.read_histograms()
        bounds = [("+Inf" if b == math.inf else str(b)) for b in metrics.BUCKETS]
        for name, (prom, help_, labels) in HISTOGRAMS.items():
            histogram = HistogramMetricFamily(prom, help_, labels=labels)
            for h in stored.get(name, []):
                histogram.add_metric([h["labels"].get(label, "") for label in labels],
                                     list(zip(bounds, h["buckets"])), h["sum"])
            yield histogram
        yield from self._gauges(fleet.snapshot(counters))  # one read of the counters per scrape

    @staticmethod
    def _gauges(snap: dict[str, Any]) -> Iterator[Metric]:
        docs = GaugeMetricFamily("situate_documents", "Documents by state.", labels=["collection", "state"])
        chunks = GaugeMetricFamily("situate_index_chunks", "Chunks in the index now.", labels=["collection"])
        for row in snap["collections"]:
            for state, n in row["documents"].items():
                docs.add_metric([row["collection"], state], n)
            if row["chunks_indexed"] is not None:
                chunks.add_metric([row["collection"]], row["chunks_indexed"])
        yield docs
        yield chunks
        lifecycle = GaugeMetricFamily("situate_collection_model_end_of_life", "1 for a collection whose LLM "
                                      "model is deprecated or retired (status label); move it with situate reindex.",
                                      labels=["collection", "model", "status", "target"])
        move_cost = GaugeMetricFamily("situate_collection_reindex_estimate_usd", "About what moving the "
                                      "collection to the target model costs (its bill, repriced).",
                                      labels=["collection", "target"])
        reindexing = GaugeMetricFamily("situate_collection_reindex", "1 while a reindex is in this phase.",
                                       labels=["collection", "phase"])
        for row in snap["collections"]:
            flag = row.get("model_status")
            if flag:
                lifecycle.add_metric([row["collection"], row["model"] or "", flag["status"], flag.get("target") or ""], 1)
                if flag.get("estimate_usd") is not None:
                    move_cost.add_metric([row["collection"], flag["target"]], flag["estimate_usd"])
            if row.get("reindex"):
                reindexing.add_metric([row["collection"], row["reindex"]], 1)
        yield lifecycle
        yield move_cost
        yield reindexing
        ratio = GaugeMetricFamily("situate_llm_cache_read_ratio", "Cache reads / prompt tokens.",
                                  labels=["collection", "model"])
        best = GaugeMetricFamily("situate_llm_cache_read_best_ratio",
                                 "The best cache-read ratio the same calls could have had.",
                                 labels=["collection", "model"])
        for row in snap["by_model"].values():
            if row["cache_read_ratio"] is not None:  # a server that never said what it read: no figure, not 0
                ratio.add_metric([row["collection"], row["model"]], row["cache_read_ratio"])
            best.add_metric([row["collection"], row["model"]], row["best_read_ratio"])
        yield ratio
        yield best
        yield from _replicas()
        depth = GaugeMetricFamily("situate_queue_messages", "Messages waiting, over all priority lists.",
                                  labels=["queue"])
        lists = GaugeMetricFamily("situate_queue_list_messages", "Messages waiting in each of Kombu's "
                                  "priority lists (list: the Redis key).", labels=["queue", "list"])
        oldest = GaugeMetricFamily("situate_queue_oldest_age_seconds", "Age of the oldest waiting message "
                                   "(parked work included).", labels=["queue"])
        backlog = GaugeMetricFamily("situate_queue_backlog", "What scales a queue's workers: waiting in every "
                                    "priority list, parked, and delivered but not acknowledged.", labels=["queue"])
        held = GaugeMetricFamily("situate_queue_unacked_messages", "Delivered to a worker (prefetched "
                                 "included), not yet acknowledged.", labels=["queue"])
        parked = GaugeMetricFamily("situate_queue_parked_messages", "Work waiting for its collection's turn to "
                                   "enter the queue (fair shares between collections).", labels=["queue", "collection"])
        for q, row in snap["queues"].items():
            depth.add_metric([q], row["waiting"])
            backlog.add_metric([q], row["backlog"])
            held.add_metric([q], row["unacked"])
            for key, n in row["by_priority_list"].items():
                lists.add_metric([q, key], n)
            oldest.add_metric([q], row["oldest_s"] or 0.0)
            for collection, n in row["parked_by_collection"].items():
                parked.add_metric([q, collection], n)
        yield depth
        yield backlog
        yield held
        yield lists
        yield oldest
        yield parked
        yield _index_blocks()
        yield GaugeMetricFamily("situate_unacked_messages", "Delivered, not yet acknowledged.",
                                value=snap["unacked"]["count"])
        yield GaugeMetricFamily("situate_unacked_oldest_heartbeat_age_seconds",
                                "Since the holder of the stalest unacknowledged message last said it "
                                "was alive: above a few heartbeats, a dead worker's messages.",
                                value=snap["unacked"]["oldest_heartbeat_s"] or 0.0)
        yield GaugeMetricFamily("situate_workers_online", "Workers that sent a heartbeat lately.",
                                value=len(snap["workers"]))
        active = GaugeMetricFamily("situate_worker_active_tasks", "Tasks each worker is running.",
                                   labels=["worker"])
        for w in snap["workers"]:
            active.add_metric([w["hostname"]], len(w["active"]))
        yield active


registry = CollectorRegistry(auto_describe=False)
registry.register(FleetCollector())
api_requests = Counter("situate_api_requests", "API requests answered.", ["method", "route", "status"],
                       registry=registry)
api_seconds = Histogram("situate_api_request_seconds", "API request latency.", ["method", "route"],
                        registry=registry, buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))


def render() -> bytes:
    return generate_latest(registry)


def _replicas() -> Iterator[Metric]:
    """Servers of your own, per replica: calls in flight (the fleet's), documents moved away from
    it, whether it is up, and the share of its prompt tokens it read from its cache."""
    rows = fleet.replicas()
    in_flight = GaugeMetricFamily("situate_llm_replica_calls_in_flight", "Calls sent to a replica and not yet "
                                  "answered (waiting for one of its slots, or in one).", labels=["replica"])
    moved = CounterMetricFamily("situate_llm_replica_documents_moved", "Documents whose calls moved away from a "
                                "replica (it went down while they were under way).", labels=["replica"])
    up = GaugeMetricFamily("situate_llm_replica_up", "1 while a replica is in the routing, 0 while it is left "
                           "alone after refusing a connection or timing out.", labels=["replica"])
    read = GaugeMetricFamily("situate_llm_replica_cache_read_ratio", "The share of a replica's prompt tokens it "
                             "read from its prefix cache (absent where it never said).", labels=["replica"])
    lists = GaugeMetricFamily("situate_llm_replica_lists", "Different lists of replicas the workers announced in "
                              "the last minutes: 1 when they agree on the fleet.")
    lists.add_metric([], len(fleet.replica_lists()))
    yield lists
    for label, r in rows.items():
        in_flight.add_metric([label], r["in_flight"])
        moved.add_metric([label], r["moved_away"])
        up.add_metric([label], 0 if r["down"] else 1)
        if r["cache_read_ratio"] is not None:
            read.add_metric([label], r["cache_read_ratio"])
    yield from (in_flight, moved, up, read)


def _index_blocks() -> GaugeMetricFamily:
    """1 per write block on one of our indexes now (``read_only_allow_delete``: the disk passed
    the flood-stage watermark; the index stage waits and retries until it is lifted)."""
    family = GaugeMetricFamily("situate_index_blocked", "A write block on an index now (block: read_only_allow_delete "
                               "for a full disk, write, read_only).", labels=["index", "block"])
    try:
        found = opensearch_client().indices.get_settings(index="situate-*", name="index.blocks*",
                                                         allow_no_indices=True, ignore_unavailable=True)
    except Exception:  # noqa: BLE001 - OpenSearch away: the other gauges say so; no block to report
        return family
    for index, body in found.items():
        for block, value in (body.get("settings", {}).get("index", {}).get("blocks") or {}).items():
            if str(value).lower() == "true":
                family.add_metric([index, block], 1)
    return family

