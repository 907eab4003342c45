"""``situate reindex``: a collection's next generation, built behind its name (workers/pipeline/rebuild.py);
``situate compact``: its index merged into few segments (workers/storage/compaction.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from producers.cli.common import err, existing, fail, out, safe
from workers import errors


def reindex(
    collection: str = typer.Option(..., "--collection", "-c"),
    model: str | None = typer.Option(None, help="The LLM model of the next generation."),
    contextualizer: str | None = typer.Option(None, help="keywords | structural | none | anthropic | bedrock | openai | llama"),
    embedder: str | None = typer.Option(None, help="local | local-multilingual | voyage | voyage-context | bedrock"),
    embed_model: str | None = typer.Option(None, help="The embedder's model (API embedders)."),
    embed_tail: float | None = typer.Option(None, help="How much of a paged document's chunk past a local embedder's "
                                            "256 tokens counts in its vector: 0 (cut) to 1 (as much as the head)."),
    embed_header: str | None = typer.Option(None, help="What of an extracted document's offline header its "
                                            "vectors read: cover | all | none."),
    chunk_tokens: int | None = typer.Option(None, help="Chunk size in tokens."),
    chunk_overlap: int | None = typer.Option(None, help="Overlap in tokens."),
    language: str | None = typer.Option(None, help="english | french | german."),
    vectors: str | None = typer.Option(None, help="float (exact) | lucene-sq | byte: how vectors are stored."),
    glossary_file: Path | None = typer.Option(None, "--glossary-file", exists=True, dir_okay=False,
                                              help="Terms the documents use, sent before each document (a changed "
                                                   "glossary situates again)."),
    prompt_file: Path | None = typer.Option(None, "--prompt-file", exists=True, dir_okay=False,
                                            help="The chunk instruction for a language model (holds {chunk_content})."),
    index_shards: int | None = typer.Option(None, min=1, max=64, help="The index's primary shards."),
    index_replicas: str | None = typer.Option(
        None, help="Replicas: a count (1) or a range kept to the nodes there are (0-1); alone, changed in place."),
    estimate: bool = typer.Option(False, "--estimate", help="Print the bill (calls, tokens, cost) and change nothing."),
    rollback: bool = typer.Option(False, "--rollback", help="Abandon the reindex under way, or go back to the "
                                  "previous generation after one."),
    finish: bool = typer.Option(False, "--finish", help="Drop the previous generation (no rollback after this)."),
    show: bool = typer.Option(False, "--status", help="Print where the reindex stands and return."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once started (the workers carry it on)."),
    timeout: float | None = typer.Option(None, help="Stop waiting after this many seconds (it carries on)."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Rebuild a collection with other settings behind the same name: searches answer from the
    live generation until the new one holds every document, then switch in one step. Contexts
    are reused where their text, document, contextualizer, model and prompt are unchanged."""
    from producers.cli.documents import read_text_file, show_estimate
    from producers.ingest.estimate import estimate_reindex
    from workers.pipeline import rebuild

    existing(collection)
    changes = dict(model=model, contextualizer=contextualizer, embedder=embedder, embed_model=embed_model,
                   embed_tail=embed_tail, embed_header=embed_header, chunk_tokens=chunk_tokens,
                   chunk_overlap=chunk_overlap, language=language,
                   vectors=vectors, index_shards=index_shards, index_replicas=index_replicas,
                   glossary=read_text_file(glossary_file), prompt=read_text_file(prompt_file))
    try:
        if rollback or finish or show:
            if sum((rollback, finish, show)) > 1 or any(v is not None for v in changes.values()):
                fail("--rollback, --finish and --status take no other setting")
            result = (rebuild.rollback(collection) if rollback else rebuild.finish(collection) if finish
                      else rebuild.status(collection) or {"collection": collection, "phase": "none"})
            _print(result, json_output)
            return
        if estimate:
            show_estimate(estimate_reindex(collection, **changes), json_output)
            return
        record = rebuild.start(collection, **changes)
    except (errors.CollectionError, ValueError) as e:
        fail(str(e))
    if record.get("in_place"):
        _print(record, json_output)
        return
    if not json_output:
        out.print(f"{safe(collection)}: building generation {record['to']} ({safe(record['changes'])}); searches "
                  f"answer from generation {record['from']} meanwhile", highlight=False)
    if no_wait:
        _print(rebuild.status(collection) or record, json_output)
        return
    final = _wait(collection, record, timeout, json_output)
    _print(final, json_output)
    if final.get("phase") != "live":
        raise typer.Exit(1)


def _wait(collection: str, record: dict[str, Any], timeout: float | None, quiet: bool) -> dict[str, Any]:
    from workers.pipeline import rebuild

    give_up = time.monotonic() + timeout if timeout else None
    total = max(1, int(record.get("documents") or 0))
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, disable=quiet)
    with progress:
        task = progress.add_task("building", total=total)
        while True:
            now = rebuild.status(collection) or {"phase": "gone"}
            if now["phase"] in ("live", "gone"):
                progress.update(task, completed=total, description=now["phase"])
                return now
            counts = now.get("progress") or {}
            progress.update(task, completed=min(total, counts.get("indexed", 0)),
                            description=f"{now['phase']} ({counts.get('failed', 0)} failed)"
                            + (f"; last error: {safe(now['error'])}" if now.get("error") else ""))
            if give_up is not None and time.monotonic() > give_up:
                return now
            time.sleep(1)


def _print(result: dict[str, Any], json_output: bool) -> None:
    if json_output:
        print(json.dumps(result))
        return
    out.print(", ".join(f"{k} {safe(v)}" for k, v in result.items() if k not in ("changes",)), highlight=False)
    failed = (result.get("progress") or {}).get("failed", 0)
    if failed:
        out.print(f"[yellow]{failed} documents failed in the new generation[/yellow]: see `situate failed -c "
                  f"{safe(result.get('shadow'))}`, retry them with `situate retry -c {safe(result.get('shadow'))}`, "
                  "or abandon the reindex with --rollback", highlight=False)


def compact(
    collection: str = typer.Option(..., "--collection", "-c"),
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Merge a collection's index into as few segments as its size needs, now, and wait: a search
    walks every segment. The workers do this by themselves once an index has gone unwritten for
    SITUATE_COMPACT_IDLE_S; this is for not waiting, or with that set to 0."""
    from workers.storage import compaction

    config = existing(collection)
    started = time.monotonic()
    merged = compaction.compact(config.index_name)
    if merged is None:
        fail(f"collection {collection!r} has no index yet")
    before, after = merged
    result = {"collection": collection, "segments_before": before.segments, **compaction.describe(after),
              "seconds": round(time.monotonic() - started, 1)}
    if json_output:
        print(json.dumps(result))
        return
    out.print(f"{safe(collection)}: {before.segments} segments -> {after.segments} "
              f"(as few as {after.target} for {after.store_bytes / 1e6:.0f} MB) in {result['seconds']} s", highlight=False)
