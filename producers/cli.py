"""The ``situate`` command: ingest, search, status, eval, and the long-running processes
(``worker``, ``api``). Typer for parsing, Rich for the progress bar and tables.

Collection-shaping flags (``--contextualizer``, ``--embedder``…) only matter when the
collection is created; afterwards asking for a different value is an error, not a silent mix.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

cli = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Contextual Retrieval at production scale.")
out = Console()
err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def _collection(name: str, **requested):
    from workers import collections

    try:
        return collections.ensure(name, **requested)
    except (collections.CollectionError, ValueError) as e:
        _fail(str(e))


def _existing(name: str):
    from workers import collections

    try:
        return collections.load(name)
    except collections.CollectionError as e:
        _fail(str(e))


@cli.command()
def ingest(
    paths: list[str] = typer.Argument(..., help="Files, folders, .jsonl files, or the cookbook JSON."),
    collection: str = typer.Option(..., "--collection", "-c"),
    fmt: str = typer.Option("auto", "--format", help="auto | files | jsonl | cookbook"),
    contextualizer: Optional[str] = typer.Option(None, help="At creation: none | structural | …"),
    model: Optional[str] = typer.Option(None, help="At creation: the LLM model id."),
    embedder: Optional[str] = typer.Option(None, help="At creation: the embedder."),
    language: Optional[str] = typer.Option(None, help="At creation: english | french | german."),
    chunk_tokens: Optional[int] = typer.Option(None, help="At creation: chunk size in tokens."),
    chunk_overlap: Optional[int] = typer.Option(None, help="At creation: overlap in tokens."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once queued."),
    batch: bool = typer.Option(False, "--batch", help="Situate through Anthropic Message Batches (-50%, slower)."),
    timeout: Optional[float] = typer.Option(None, help="Stop waiting after this many seconds."),
    json_output: bool = typer.Option(False, "--json", help="Print a JSON summary."),
) -> None:
    """Queue documents; by default wait until each is indexed or failed (exit 1 if any failed)."""
    from producers import loaders, submit

    if fmt not in loaders.FORMATS:
        _fail(f"--format must be one of {loaders.FORMATS}")
    for p in paths:
        if not Path(p).exists():
            _fail(f"no such file or folder: {p}")
    config = _collection(collection, contextualizer=contextualizer, model=model, embedder=embedder,
                         language=language, chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap)
    if batch and config.contextualizer != "anthropic":
        _fail("--batch needs a collection situated with the anthropic contextualizer")
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, disable=json_output)
    submissions = []
    run = submit.new_run()
    with progress:
        task = progress.add_task("queueing", total=None)
        for raw in loaders.load(paths, fmt):
            submissions.append(submit.submit_one(config, raw, run, batch))
            progress.advance(task)
        progress.update(task, total=len(submissions))
        if no_wait:
            final = {s.doc_id: {"doc_id": s.doc_id, "state": s.state, "error": s.error} for s in submissions}
        else:
            progress.reset(task, total=len(submissions), description="indexing")
            final = submit.wait(config, submissions, timeout=timeout,
                                on_progress=lambda done, total: progress.update(task, completed=done))
            # Indexed chunks become searchable at the next refresh (1 s); when this command
            # returns, they should already be.
            from workers import index

            index.refresh(config)
    failed = [d for d in final.values() if d["state"] == "failed"]
    pending = [d for d in final.values() if d["state"] not in ("indexed", "failed", "unchanged") and not no_wait]
    unchanged = sum(1 for s in submissions if s.state == "unchanged")
    summary = {"collection": collection, "run": run, "documents": len(submissions), "unchanged": unchanged,
               "indexed": sum(1 for d in final.values() if d["state"] == "indexed"),
               "queued": sum(1 for d in final.values() if d["state"] == "queued") if no_wait else 0,
               "failed": [{"doc_id": d["doc_id"], "error": d.get("error")} for d in failed],
               "pending": [d["doc_id"] for d in pending]}
    if json_output:
        print(json.dumps(summary))
    else:
        verb = "queued" if no_wait else "indexed"
        out.print(f"{collection}: {len(submissions)} documents, "
                  f"{summary['queued'] if no_wait else summary['indexed']} {verb} "
                  f"({unchanged} unchanged), {len(failed)} failed"
                  + (f", {len(pending)} still pending" if pending else ""))
        for d in failed:
            out.print(f"  [red]failed[/red] {d['doc_id']}: {d.get('error')}")
    if failed or pending:
        raise typer.Exit(1)


@cli.command()
def search(
    query: str = typer.Argument(...),
    collection: str = typer.Option(..., "--collection", "-c"),
    k: int = typer.Option(10, "--k", min=1, max=1000),
    mode: str = typer.Option("hybrid", help="hybrid | bm25 | dense"),
    filters: list[str] = typer.Option([], "--filter", help="metadata KEY=VALUE (repeatable)"),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Hybrid search (BM25 + k-NN, RRF) over a collection."""
    import time

    from workers import search as search_mod

    from workers import embedders

    config = _existing(collection)
    embedders.get(config.embedder)  # load the model before the clock starts
    parsed = {}
    for f in filters:
        key, _, value = f.partition("=")
        parsed.setdefault(key, []).append(value)
    flat = {k_: v[0] if len(v) == 1 else v for k_, v in parsed.items()}
    started = time.perf_counter()
    hits = search_mod.search(config, query, k=k, filters=flat, mode=mode)
    took_ms = (time.perf_counter() - started) * 1000
    if json_output:
        print(json.dumps({"took_ms": round(took_ms, 1), "hits": [
            {"doc_id": h.doc_id, "chunk": h.chunk, "score": h.score, "text": h.text, "context": h.context,
             "metadata": h.metadata} for h in hits]}))
        return
    for rank, h in enumerate(hits, start=1):
        out.print(f"[bold]{rank:>2}.[/bold] {h.doc_id} #{h.chunk}  score={h.score:.4f}")
        if h.context:
            out.print(f"    [cyan]{h.context[:160]}[/cyan]")
        snippet = " ".join(h.text.split())[:160]
        out.print(f"    {snippet}", highlight=False)
    out.print(f"[dim]{len(hits)} hits in {took_ms:.0f} ms[/dim]")


@cli.command()
def status(
    collection: Optional[str] = typer.Option(None, "--collection", "-c"),
    doc_id: Optional[str] = typer.Option(None, "--doc"),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Collections with their settings, document counts by state, chunks indexed, and queues."""
    from workers import collections, index, status as status_mod
    from workers.app import all_queues, queue_length
    from workers.connections import redis_client

    if collection and doc_id:
        doc = status_mod.get(collection, doc_id)
        if doc is None:
            _fail(f"no document {doc_id!r} in {collection!r}", 1)
        print(json.dumps(doc, indent=None if json_output else 2))
        return
    names = [collection] if collection else collections.list_names()
    rows = []
    for name in names:
        config = _existing(name)
        try:
            chunks = index.count(config)
        except Exception as e:  # index missing or node down: say so, keep going
            chunks = f"? ({type(e).__name__})"
        rows.append({"collection": name, "documents": status_mod.counts(name), "chunks_indexed": chunks,
                     "settings": collections.describe(config)})
    r = redis_client()
    queues = {q: queue_length(r, q) for q in all_queues()}
    if json_output:
        print(json.dumps({"collections": rows, "queues": queues}))
        return
    table = Table("collection", "documents by state", "chunks", "contextualizer", "embedder", "language")
    for row in rows:
        s = row["settings"]
        table.add_row(row["collection"], ", ".join(f"{k}={v}" for k, v in sorted(row["documents"].items())) or "-",
                      str(row["chunks_indexed"]), s["contextualizer"] + (f" ({s['model']})" if s["model"] else ""),
                      s["embedder"], s["language"])
    out.print(table)
    out.print("queues waiting: " + ", ".join(f"{q}={n}" for q, n in queues.items()))


@cli.command()
def stats(
    collection: Optional[str] = typer.Option(None, "--collection", "-c"),
    runs: int = typer.Option(5, help="How many recent runs to show."),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """The LLM bill: tokens, cache-read ratio beside the best possible, cost, 429/529 counts."""
    from workers import usage

    from workers import collections

    names = [collection] if collection else collections.list_names()
    report = {"all": usage.totals(None) if not collection else None,
              "collections": {n: {"total": usage.totals(n),
                                  "runs": {r: usage.totals(n, r) for r in usage.runs(n, runs)}} for n in names}}
    if json_output:
        print(json.dumps(report))
        return
    table = Table("collection / run", "calls", "tokens in / write / read / out", "cache read (best)",
                  "cost $", "$ per M doc tokens", "429 / 529 / 5xx")

    def row(label: str, t: dict) -> None:
        per_m = t["cost_per_million_document_tokens"]
        table.add_row(label, f"{t['calls']:,}",
                      f"{t['input_tokens']:,} / {t['cache_write_tokens']:,} / {t['cache_read_tokens']:,} / "
                      f"{t['output_tokens']:,}",
                      f"{t['cache_read_ratio']:.1%} ({t['best_read_ratio']:.1%})", f"{t['cost_usd']:.4f}",
                      "-" if per_m is None else f"{per_m:.2f}", f"{t['http_429']} / {t['http_529']} / {t['http_5xx']}")

    for name, data in report["collections"].items():
        if not data["total"]["calls"]:
            continue
        row(name, data["total"])
        for run_id, t in data["runs"].items():
            row(f"  run {run_id}", t)
    out.print(table)


@cli.command("eval")
def eval_cmd(
    collection: str = typer.Option(..., "--collection", "-c"),
    queries: Path = typer.Option(..., "--queries", exists=True, dir_okay=False),
    fmt: str = typer.Option("cookbook", "--format", help="cookbook | jsonl"),
    modes: str = typer.Option("hybrid,bm25,dense", help="comma-separated search modes"),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Pass@5/10/20 and latency of each search mode on labelled queries."""
    from producers.evaluate import KS, evaluate, load_queries
    from workers import search as search_mod

    config = _existing(collection)
    labelled = load_queries(queries, fmt)
    results = []
    for mode in modes.split(","):
        def run(q: str, k: int, mode=mode):
            return [(h.doc_id, h.chunk) for h in search_mod.search(config, q, k=k, mode=mode)]
        results.append(evaluate(labelled, run, mode))
    if json_output:
        print(json.dumps([{"mode": r.mode, "queries": r.queries, **{f"pass@{k}": round(r.pass_at[k], 2) for k in KS},
                           "latency_ms_p50": round(r.latency_ms_p50, 1), "latency_ms_p95": round(r.latency_ms_p95, 1)}
                          for r in results]))
        return
    table = Table("mode", *[f"Pass@{k}" for k in KS], "p50 ms", "p95 ms",
                  title=f"{collection} ({config.contextualizer}), {len(labelled)} queries")
    for r in results:
        table.add_row(r.mode, *[f"{r.pass_at[k]:.2f}" for k in KS], f"{r.latency_ms_p50:.0f}", f"{r.latency_ms_p95:.0f}")
    out.print(table)


@cli.command("drop")
def drop(collection: str = typer.Option(..., "--collection", "-c"),
         yes: bool = typer.Option(False, "--yes", help="Do not ask.")) -> None:
    """Delete a collection: its index, settings and document states."""
    from workers import collections

    _existing(collection)
    if not yes and not typer.confirm(f"delete collection {collection!r} and its index?"):
        raise typer.Exit(1)
    collections.delete(collection)
    out.print(f"dropped {collection}")


@cli.command()
def worker(
    queues: Optional[str] = typer.Option(None, help="Comma-separated queues (default: all)."),
    concurrency: int = typer.Option(2, "--concurrency", "-c", min=1),
    loglevel: str = typer.Option("INFO"),
    hostname: Optional[str] = typer.Option(None, help="Celery node name (default situate@host)."),
    pool: str = typer.Option("prefork", help="prefork (CPU: chunking, embedding) or threads (LLM calls)."),
) -> None:
    """Run a Celery worker on the situate queues. For LLM contextualizers, a worker with
    ``--pool threads`` on the situate.N queues keeps many documents' calls in flight."""
    import os

    from workers.app import all_queues, app

    # Each pool process embeds with ONNX Runtime, which by default spreads over every core:
    # N processes x all cores oversubscribes the CPU (measured: 8.6 -> 11.3 chunks/s on 2
    # cores with 2 processes when each takes its share).
    os.environ.setdefault("SITUATE_EMBED_THREADS", str(max(1, (os.cpu_count() or 1) // concurrency)))
    argv = ["worker", "--queues", queues or ",".join(all_queues()), "--concurrency", str(concurrency),
            "--loglevel", loglevel, "--pool", pool, "--events", "--without-gossip", "--without-mingle"]
    if hostname:
        argv += ["--hostname", hostname]
    app.worker_main(argv)


@cli.command()
def api(host: str = typer.Option("127.0.0.1"), port: int = typer.Option(8000)) -> None:
    """Serve the HTTP API (OpenAPI docs at /docs)."""
    import uvicorn

    uvicorn.run("producers.api:app", host=host, port=port, log_level="info")


def main() -> None:
    try:
        cli()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
