"""``situate status`` and ``situate stats``: where documents are, and what they cost."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Group
from rich.table import Table

from producers.cli.common import existing, fail, out, safe


def status(
    collection: str | None = typer.Option(None, "--collection", "-c"),
    doc_id: str | None = typer.Option(None, "--doc"),
    json_output: bool = typer.Option(False, "--json"),
    watch: bool = typer.Option(False, "--watch", "-w", help="Live bars per collection and stage, until Ctrl-C."),
    interval: float = typer.Option(2.0, help="Seconds between updates with --watch.", min=0.2),
) -> None:
    """Collections with their settings, document counts by state, chunks indexed, and queues."""
    from producers.web import fleet
    from workers.storage import catalog, chunk_index, states

    if watch:
        return _watch(collection, interval)
    if collection and doc_id:
        doc = states.get(collection, doc_id)
        if doc is None:
            fail(f"no document {doc_id!r} in {collection!r}", 1)
        print(json.dumps(doc, indent=None if json_output else 2))
        return
    names = [collection] if collection else catalog.list_names()
    rows: list[dict[str, Any]] = []
    for name in names:
        config = existing(name)
        chunks: int | str
        try:
            chunks = chunk_index.count(config)
        except Exception as e:  # index missing or node down: say so, keep going
            chunks = f"? ({type(e).__name__})"
        rows.append({"collection": name, "documents": states.counts(name), "chunks_indexed": chunks,
                     "settings": catalog.describe(config)})
    fleet_queues = fleet.queues()
    queues = {q: row["waiting"] for q, row in fleet_queues.items()}
    parked = {q: row["parked"] for q, row in fleet_queues.items()}
    replica_lists = fleet.replica_lists()
    if json_output:
        print(json.dumps({"collections": rows, "queues": queues, "parked": parked, "replica_lists": replica_lists}))
        return
    table = Table("collection", "documents by state", "chunks", "contextualizer", "embedder", "language")
    for row in rows:
        s = row["settings"]
        table.add_row(safe(row["collection"]), ", ".join(f"{k}={v}" for k, v in sorted(row["documents"].items())) or "-",
                      safe(row["chunks_indexed"]), safe(s["contextualizer"] + (f" ({s['model']})" if s["model"] else "")),
                      safe(s["embedder"]), safe(s["language"]))
    out.print(table)
    for row in fleet.collections():
        flag = row.get("model_status")
        if flag and (collection is None or row["collection"] == collection):
            cost = f" (about ${flag['estimate_usd']:,.2f}; exact: add --estimate)" if flag.get("estimate_usd") else \
                " (its cost: add --estimate)"
            move = f"; move it with `{safe(flag['command'])}`{cost}" if flag.get("command") else ""
            out.print(f"[yellow]{flag['status']} model[/yellow] {safe(row['collection'])}: {safe(flag['note'])}{move}",
                      highlight=False)
        if row.get("reindex") and (collection is None or row["collection"] == collection):
            out.print(f"reindex of {safe(row['collection'])}: {safe(row['reindex'])} (`situate reindex -c "
                      f"{safe(row['collection'])} --status`)", highlight=False)
    for name in catalog.list_dropping():
        out.print(f"[yellow]being dropped[/yellow] {safe(name)}: an unfinished drop; `situate drop -c {safe(name)}` "
                  "finishes it", highlight=False)
    out.print("queues waiting (parked behind): " + ", ".join(f"{q}={n} ({parked[q]})" for q, n in queues.items()))
    if len(replica_lists) > 1:
        out.print("[yellow]the workers list the replicas differently[/yellow] (set one SITUATE_OPENAI_BASE_URLS "
                  "on every worker): " + "; ".join(f"{fp}: {', '.join(safe(x) for x in labels)}"
                                                   for fp, labels in sorted(replica_lists.items())), highlight=False)


def stats(
    collection: str | None = typer.Option(None, "--collection", "-c"),
    runs: int = typer.Option(5, help="How many recent runs to show."),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """The LLM bill: tokens, cache-read ratio beside the best possible, cost, 429/529 counts; for
    servers of your own, the time in calls and each replica's share read from its cache."""
    from workers.contextualizers.llm import usage
    from workers.storage import bill, catalog

    names = [collection] if collection else catalog.list_names()
    report: dict[str, Any] = {"all": usage.totals(None) if not collection else None,
              "collections": {n: {"total": usage.totals(n),
                                  "runs": {r: usage.totals(n, r) for r in bill.runs(n, runs)}} for n in names},
              "replicas": usage.replicas()}
    if json_output:
        print(json.dumps(report))
        return
    table = Table("collection / run", "calls", "tokens in / write / read / out", "cache read (best)",
                  "cost $", "$ per M doc tokens", "time in calls", "429 / 529 / 5xx")

    def row(label: str, t: dict[str, Any]) -> None:
        per_m = t["cost_per_million_document_tokens"]
        read = "not reported" if t["cache_read_tokens"] is None else f"{t['cache_read_tokens']:,}"
        ratio = "not reported" if t["cache_read_ratio"] is None else f"{t['cache_read_ratio']:.1%}"
        if t["cache_read_tokens"] is not None and t["cache_unreported_calls"]:
            read += f" ({t['cache_unreported_calls']:,} calls not reported)"
        table.add_row(label, f"{t['calls']:,}",
                      f"{t['input_tokens']:,} / {t['cache_write_tokens']:,} / {read} / {t['output_tokens']:,}",
                      f"{ratio} ({t['best_read_ratio']:.1%})", f"{t['cost_usd']:.4f}",
                      "-" if per_m is None else f"{per_m:.2f}", f"{t['call_seconds']:,.0f} s",
                      f"{t['http_429']} / {t['http_529']} / {t['http_5xx']}")

    for name, data in report["collections"].items():
        if not data["total"]["calls"]:
            continue
        row(name, data["total"])
        for run_id, t in data["runs"].items():
            row(f"  run {run_id}", t)
    out.print(table)
    if report["replicas"]:
        replicas = Table("replica", "calls", "read from its cache", "calls in flight", "documents moved away", "state")
        for label, r in report["replicas"].items():
            share = "not reported" if r["cache_read_ratio"] is None else f"{r['cache_read_ratio']:.1%}"
            replicas.add_row(safe(label), f"{r['calls']:,}", share, str(r["in_flight"]), str(r["moved_away"]),
                             "down" if r["down"] else "up")
        out.print(replicas)


STAGES = ("queued", "chunked", "situated", "indexed", "failed")  # the order a document moves in


def _watch(collection: str | None, interval: float) -> None:
    """One bar per collection: how many of its documents have reached each stage, then the
    queues (waiting, oldest), the workers online, and the chunks/s since the watch began."""
    import time

    from rich.live import Live
    from rich.progress_bar import ProgressBar

    from producers.web import fleet

    def frame(first: dict[str, Any], snap: dict[str, Any], elapsed: float) -> Group:
        rows = [r for r in snap["collections"] if not collection or r["collection"] == collection]
        table = Table("collection", "documents", *STAGES, "chunks", "chunks/s", box=None)
        for r in rows:
            docs = r["documents"]
            total = sum(docs.values())
            done = docs.get("indexed", 0) + docs.get("failed", 0)
            before = next((f["chunks_indexed"] or 0 for f in first["collections"] if f["collection"] == r["collection"]), 0)
            rate = ((r["chunks_indexed"] or 0) - before) / elapsed if elapsed > 0 else 0.0
            table.add_row(safe(r["collection"]), ProgressBar(total=max(1, total), completed=done, width=30),
                          *(str(docs.get(s, 0)) for s in STAGES), f"{r['chunks_indexed'] or 0:,}", f"{rate:.1f}")
        queues = Table("queue", "waiting", "parked", "oldest", box=None)
        for name, q in snap["queues"].items():
            queues.add_row(name, f"{q['waiting']:,}", f"{q['parked']:,}",
                           "-" if q["oldest_s"] is None else f"{q['oldest_s']:.0f} s")
        workers = f"workers online: {len(snap['workers'])}, busy: {sum(bool(w['active']) for w in snap['workers'])}"
        return Group(table, queues, workers)

    try:  # Ctrl-C ends the watch cleanly wherever it lands, the first snapshot included
        first = fleet.snapshot()
        started = time.monotonic()
        with Live(frame(first, first, 0), console=out, refresh_per_second=4) as live:
            while True:
                time.sleep(interval)
                live.update(frame(first, fleet.snapshot(), time.monotonic() - started))
    except KeyboardInterrupt:
        pass
