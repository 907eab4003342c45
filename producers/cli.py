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
    contextualizer: Optional[str] = typer.Option(None, help="At creation: keywords | structural | none | anthropic | bedrock"),
    model: Optional[str] = typer.Option(None, help="At creation: the LLM model id."),
    embedder: Optional[str] = typer.Option(
        None, help="At creation: local | local-multilingual | voyage | voyage-context | bedrock."),
    embed_model: Optional[str] = typer.Option(None, help="At creation: the embedder's model (API embedders)."),
    language: Optional[str] = typer.Option(None, help="At creation: english | french | german."),
    chunk_tokens: Optional[int] = typer.Option(None, help="At creation: chunk size in tokens."),
    chunk_overlap: Optional[int] = typer.Option(None, help="At creation: overlap in tokens."),
    embed_context: Optional[bool] = typer.Option(None, "--embed-context/--embed-chunk-only",
                                                 help="At creation: embed context + chunk, or the chunk alone."),
    context_weight: Optional[float] = typer.Option(None, help="At creation: BM25 weight of the context field."),
    fusion: Optional[str] = typer.Option(None, help="At creation: rrf | weighted."),
    dense_weight: Optional[float] = typer.Option(None, help="At creation: weight of the dense side in fusion."),
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
                         embed_model=embed_model,
                         language=language, chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap,
                         embed_context=embed_context, context_weight=context_weight, fusion=fusion,
                         dense_weight=dense_weight)
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
    fusion: Optional[str] = typer.Option(None, help="rrf | weighted (default: the collection's)"),
    context_weight: Optional[float] = typer.Option(None, help="BM25 weight of the context field"),
    dense_weight: Optional[float] = typer.Option(None, help="weight of the dense side in fusion"),
    reranker: Optional[str] = typer.Option(None, help="none | voyage | bedrock | cohere | onnx"),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Hybrid search (BM25 + k-NN, fused, optionally reranked) over a collection."""
    import time

    from workers import search as search_mod

    from workers import embedders

    config = _existing(collection)
    embedders.get(config.embedder, config.embed_model)  # load the model before the clock starts
    parsed = {}
    for f in filters:
        key, _, value = f.partition("=")
        parsed.setdefault(key, []).append(value)
    flat = {k_: v[0] if len(v) == 1 else v for k_, v in parsed.items()}
    started = time.perf_counter()
    options = search_mod.SearchOptions(mode=mode, fusion=fusion, context_weight=context_weight,
                                       dense_weight=dense_weight, reranker=reranker)
    try:
        hits = search_mod.search(config, query, k=k, filters=flat, options=options)
    except ValueError as e:
        _fail(str(e))
    took_ms = (time.perf_counter() - started) * 1000
    if json_output:
        print(json.dumps({"took_ms": round(took_ms, 1), "hits": [
            {"doc_id": h.doc_id, "chunk": h.chunk, "score": h.score, "text": h.text, "context": h.context,
             "metadata": h.metadata} for h in hits]}))
        return
    for rank, h in enumerate(hits, start=1):
        out.print(f"[bold]{rank:>2}.[/bold] {h.doc_id} #{h.chunk}  score={h.score:.4f}")
        if h.context:
            out.print(f"    [cyan]{' '.join(h.context.split())[:160]}[/cyan]", highlight=False)
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


def _configurations(spec: str, names: list[str]) -> list[tuple[str, str, tuple[str, bool]]]:
    """``hybrid,bm25,dense,hybrid+rerank`` x collections -> (label, collection, (mode, rerank))."""
    from workers.search import MODES, SearchOptions

    out = []
    for name in names:
        for item in [x.strip() for x in spec.split(",") if x.strip()]:
            mode, _, rerank = item.partition("+")
            if mode not in MODES or rerank not in ("", "rerank"):
                _fail(f"unknown configuration {item!r}: a mode ({', '.join(MODES)}), optionally +rerank")
            label = item if len(names) == 1 else f"{name}:{item}"
            out.append((label, name, (mode, bool(rerank))))
    return out


@cli.command("eval")
def eval_cmd(
    collections_: list[str] = typer.Option(..., "--collection", "-c",
                                           help="Repeat to compare collections (e.g. plain, then contextual)."),
    queries: Path = typer.Option(..., "--queries", exists=True, dir_okay=False),
    fmt: str = typer.Option("cookbook", "--format", help="cookbook | jsonl"),
    configs: Optional[str] = typer.Option(
        None, help="comma-separated: dense, bm25, hybrid, hybrid+rerank (default: dense,bm25,hybrid "
                   "and hybrid+rerank when a reranker is set)"),
    reranker: Optional[str] = typer.Option(None, help="reranker for +rerank configurations (default: SITUATE_RERANKER)"),
    fusion: Optional[str] = typer.Option(None, help="override every collection's fusion"),
    context_weight: Optional[float] = typer.Option(None, help="override the BM25 weight of contexts"),
    dense_weight: Optional[float] = typer.Option(None, help="override the dense weight"),
    compare: Optional[str] = typer.Option(
        None, help="BEFORE,AFTER configuration labels whose flipped queries are listed "
                   "(default: the first collection's hybrid against the last one's, or dense against hybrid)"),
    report: Optional[Path] = typer.Option(None, help="write report.md and pass_at_k.png into this folder"),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Pass@k, Recall@k (k = 5, 10, 20) and MRR@10 of each search configuration, side by side;
    the queries that flipped between two of them; optionally a markdown report and a chart."""
    from producers.evaluate import KS, MRR_K, QueryFileError, Retrieved, chart_png, evaluate, flips, load_queries, markdown_report
    from workers import search as search_mod
    from workers.settings import get_settings

    loaded = {name: _existing(name) for name in collections_}
    try:
        labelled = load_queries(queries, fmt)
    except QueryFileError as e:
        _fail(str(e))
    chosen_reranker = reranker or get_settings().reranker
    spec = configs or ("dense,bm25,hybrid" + (",hybrid+rerank" if chosen_reranker != "none" else ""))
    plan = _configurations(spec, collections_)
    results = []
    for label, name, (mode, rerank) in plan:
        if rerank and chosen_reranker == "none":
            _fail("hybrid+rerank needs a reranker: --reranker or SITUATE_RERANKER")
        options = search_mod.SearchOptions(mode=mode, fusion=fusion, context_weight=context_weight,
                                           dense_weight=dense_weight, reranker=chosen_reranker if rerank else "none")
        config = loaded[name]

        def run(q: str, k: int, config=config, options=options) -> list[Retrieved]:
            return [Retrieved(h.doc_id, h.chunk, h.text) for h in search_mod.search(config, q, k=k, options=options)]
        try:
            results.append(evaluate(labelled, run, label))
        except ValueError as e:
            _fail(str(e))
    by_label = {r.label: r for r in results}
    if compare:
        before, _, after = compare.partition(",")
        if before not in by_label or after not in by_label:
            _fail(f"--compare names two of: {', '.join(by_label)}")
        pair = (by_label[before], by_label[after])
    elif len(collections_) > 1 and f"{collections_[0]}:hybrid" in by_label and f"{collections_[-1]}:hybrid" in by_label:
        pair = (by_label[f"{collections_[0]}:hybrid"], by_label[f"{collections_[-1]}:hybrid"])
    elif len(results) > 1:
        pair = (results[0], results[-1])
    else:
        pair = None
    described = [f"{n}: contextualizer `{c.contextualizer}`{f' ({c.model})' if c.model else ''}, embedder "
                 f"`{c.embedder}`, fusion `{fusion or c.fusion}` (dense weight {dense_weight if dense_weight is not None else c.dense_weight}, "
                 f"context weight {context_weight if context_weight is not None else c.context_weight})"
                 for n, c in loaded.items()]
    title = f"Retrieval on {queries.name}: {len(labelled)} queries"
    if report:
        report.mkdir(parents=True, exist_ok=True)
        chart_png(results, report / "pass_at_k.png", title)
        notes = [f"- {d}" for d in described] + [f"- reranker: `{chosen_reranker}`"]
        (report / "report.md").write_text(markdown_report(results, pair, title, notes, "pass_at_k.png"), encoding="utf-8")
    if json_output:
        payload: dict = {"results": [r.summary() for r in results]}
        if pair:
            gained, lost = flips(*pair)
            payload["flips"] = {"before": pair[0].label, "after": pair[1].label,
                                "gained": [f.__dict__ for f in gained], "lost": [f.__dict__ for f in lost]}
        print(json.dumps(payload))
        return
    table = Table("configuration", *[f"Pass@{k}" for k in KS], *[f"Recall@{k}" for k in KS], f"MRR@{MRR_K}",
                  "p50 ms", title=title)
    for r in results:
        table.add_row(r.label, *[f"{r.pass_at[k]:.2f}" for k in KS], *[f"{r.recall_at[k]:.2f}" for k in KS],
                      f"{r.mrr:.3f}", f"{r.latency_ms_p50:.0f}")
    out.print(table, width=max(out.width, 150))  # wide enough for its columns, even in a log
    for d in described:
        out.print(f"[dim]{d}[/dim]")
    if pair:
        gained, lost = flips(*pair)
        out.print(f"{pair[0].label} -> {pair[1].label}: {len(gained)} queries gained at Pass@10, {len(lost)} lost"
                  + (f" (details in {report / 'report.md'})" if report else ""))
        for f in (gained[:3] + lost[:3]):
            out.print(f"  {'+' if f.after > f.before else '-'} {f.query[:100]}  ({f.before:.2f} -> {f.after:.2f})",
                      highlight=False)
    if report:
        out.print(f"report: {report / 'report.md'}, chart: {report / 'pass_at_k.png'}")


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
