"""Documents in and out: ``ingest``, ``delete``, ``failed``, ``retry``; collections out: ``drop``."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from producers.cli.common import err, existing, fail, open_or_create, out, safe
from workers import errors

if TYPE_CHECKING:
    from workers.documents.validation import RawDocument


def _queue_all(config: Any, documents: Iterable[tuple[str, Any]], run: str, batch: bool, tracker: Any,
               show: Callable[[str], None], listing: Any) -> None:
    """Submit every document (``(source, raw)``), each recorded against the source it came from
    (``--sync``), following the ones in flight as it goes: when the backlog is full, the next
    document waits in its source while the workers make room."""
    import time

    from producers.ingest import s3, submit
    from producers.ingest import sync as sync_
    from workers.storage import capacity

    def waiting(busy: Exception) -> None:
        tracker.poll()
        show("waiting: the collection is switching generations" if not isinstance(busy, errors.BacklogFull)
             else "waiting for room: the backlog is full")

    last_poll = time.monotonic()
    for source, raw in documents:
        while capacity.too_full():  # Redis near its limit: let the workers drain it first
            show("waiting for Redis to drain")
            tracker.poll()
            time.sleep(2)
        submission = submit.submit_when_free(config, raw, run, batch, on_wait=waiting)
        if submission.state != "failed":
            s3.remember(config.name, raw.doc_id, listing)
        sync_.record(config.name, raw.doc_id, source)
        tracker.add(submission)
        if time.monotonic() - last_poll > 1.0:
            tracker.poll()
            last_poll = time.monotonic()
            show("queueing")


def _check_sources(paths: list[str], fmt: str) -> None:
    """Refuse a bad format or a missing source before anything is queued."""
    from producers.ingest import loaders, s3

    if fmt not in loaders.FORMATS:
        fail(f"--format must be one of {loaders.FORMATS}")
    for p in paths:
        if s3.is_s3(p):
            try:
                s3.parse(p)
            except ValueError as e:
                fail(str(e))
        elif not Path(p).exists():
            fail(f"no such file or folder: {p}")


def ingest(
    paths: list[str] = typer.Argument(
        ..., help="Files, folders, .jsonl files, the cookbook JSON, or s3://bucket/prefix (one object, one document)."),
    collection: str = typer.Option(..., "--collection", "-c"),
    fmt: str = typer.Option("auto", "--format", help="auto | files | jsonl | cookbook"),
    contextualizer: str | None = typer.Option(None, help="At creation: keywords | structural | none | anthropic | bedrock "
                                                          "| openai | llama"),
    model: str | None = typer.Option(None, help="At creation: the LLM model id."),
    embedder: str | None = typer.Option(
        None, help="At creation: local | local-multilingual | voyage | voyage-context | bedrock."),
    embed_model: str | None = typer.Option(None, help="At creation: the embedder's model (API embedders)."),
    embed_tail: float | None = typer.Option(None, help="At creation: the weight of a paged document's chunk's "
                                            "tokens past a local embedder's 256, against the head's 1 (0: cut there)."),
    embed_header: str | None = typer.Option(None, help="At creation: what of an extracted document's offline "
                                            "header its vectors read: cover (the default) | all | none."),
    language: str | None = typer.Option(None, help="At creation: english | french | german."),
    chunk_tokens: int | None = typer.Option(None, help="At creation: chunk size in tokens."),
    chunk_overlap: int | None = typer.Option(None, help="At creation: overlap in tokens."),
    embed_context: bool | None = typer.Option(None, "--embed-context/--embed-chunk-only",
                                                 help="At creation: embed context + chunk, or the chunk alone."),
    context_weight: float | None = typer.Option(None, help="At creation: BM25 weight of the context field."),
    fusion: str | None = typer.Option(None, help="At creation: rrf | weighted."),
    dense_weight: float | None = typer.Option(
        None, help="At creation: weight of the dense side in fusion (default: by the collection's share of code)."),
    rrf_k: int | None = typer.Option(None, "--rrf-k", min=1, max=1000, help="At creation: RRF's k."),
    index_shards: int | None = typer.Option(None, min=1, max=64, help="At creation: the index's primary shards "
                                            "(default: by --expected-chunks)."),
    expected_chunks: int | None = typer.Option(None, min=0, help="At creation: about how many chunks the collection "
                                               "will hold (a PDF page makes about two), to size its index's shards."),
    index_replicas: str | None = typer.Option(
        None, help="At creation: replicas, a count (1) or a range kept to the nodes there are (0-1, the default)."),
    vectors: str | None = typer.Option(None, help="At creation: float (exact, the default) | lucene-sq | byte."),
    glossary_file: Path | None = typer.Option(None, "--glossary-file", exists=True, dir_okay=False,
                                              help="At creation: terms your documents use, sent to the language model "
                                                   "before each document and cached across them."),
    prompt_file: Path | None = typer.Option(None, "--prompt-file", exists=True, dir_okay=False,
                                            help="At creation: the chunk instruction for a language model (holds "
                                                 "{chunk_content})."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once queued."),
    batch: bool = typer.Option(False, "--batch", help="Situate through Anthropic Message Batches (-50%, slower)."),
    timeout: float | None = typer.Option(None, help="Stop waiting after this many seconds."),
    json_output: bool = typer.Option(False, "--json", help="Print a JSON summary."),
    estimate: bool = typer.Option(False, "--estimate", help="Print the bill (calls, tokens, cost, time at the "
                                  "rate limits) and queue nothing; no LLM call is made."),
    include: list[str] = typer.Option([], "--include", help="Folders: only files matching this glob (repeatable), "
                                      "on the path relative to the folder or the file name: '*.pdf', 'reports/*'."),
    exclude: list[str] = typer.Option([], "--exclude", help="Folders: leave out files matching this glob (repeatable)."),
    follow_symlinks: bool = typer.Option(False, "--follow-symlinks",
                                         help="Folders: follow symbolic links (never to anything outside the folder)."),
    sync: bool = typer.Option(False, "--sync", help="Also delete the documents of these sources that are gone "
                              "from them (a folder's deleted files, an S3 prefix's deleted objects)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="With --sync: list what would be deleted; change nothing."),
    force: bool = typer.Option(False, "--force", help="With --sync: delete even more than half of a source."),
) -> None:
    """Queue documents; by default wait until each is indexed or failed (exit 1 if any failed)."""

    from producers.ingest import loaders, s3, submit
    from producers.ingest import sync as sync_

    _check_sources(paths, fmt)
    listing = s3.Listing()
    selection = loaders.Selection(include=include, exclude=exclude, follow_symlinks=follow_symlinks)
    skipped = loaders.Skipped()

    seen: dict[str, set[str]] = {}  # with --sync: source -> the documents this pass found in it

    def documents() -> Iterator[tuple[str, RawDocument]]:
        for p in paths:
            source = sync_.source_of(p)
            found = seen.setdefault(source, set()) if sync else None
            for raw in (s3.documents(collection, p, listing) if s3.is_s3(p)
                        else loaders.load([p], fmt, selection, skipped)):
                if found is not None:
                    found.add(raw.doc_id)
                yield source, raw

    requested = dict(contextualizer=contextualizer, model=model, embedder=embedder,
                     embed_model=embed_model, embed_tail=embed_tail, embed_header=embed_header, language=language,
                     chunk_tokens=chunk_tokens, chunk_overlap=chunk_overlap, embed_context=embed_context,
                     context_weight=context_weight, fusion=fusion, dense_weight=dense_weight, rrf_k=rrf_k,
                     index_shards=index_shards, index_replicas=index_replicas, vectors=vectors,
                     glossary=read_text_file(glossary_file), prompt=read_text_file(prompt_file))
    if estimate:
        return _print_estimate(collection, requested, (raw for _, raw in documents()), json_output)
    if (dry_run or force) and not sync:
        fail("--dry-run and --force go with --sync")
    if sync and dry_run:
        for _ in documents():
            pass
        _sync(collection, paths, seen, listing, skipped, dry_run=True, force=force, json_output=json_output)
        return
    config = open_or_create(collection, expected_chunks=expected_chunks, **requested)
    if batch and config.contextualizer != "anthropic":
        fail("--batch needs a collection situated with the anthropic contextualizer")
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                        TimeElapsedColumn(), console=err, disable=json_output)
    run = submit.new_run()
    tracker = submit.Tracker(config)
    with progress:
        task = progress.add_task("queueing", total=None, rate="")

        def show(what: str, total: int | None = None) -> None:
            progress.update(task, description=f"{what}: {tracker.counts['submitted']:,} submitted",
                            completed=tracker.ended, total=total, rate=f"{tracker.rate():,.1f} documents/s")

        _queue_all(config, documents(), run, batch, tracker, show, listing)
        if not no_wait:
            tracker.follow(timeout, lambda t: show("indexing", total=t.counts["submitted"]))
            # Indexed chunks become searchable at the next refresh (1 s); when this command
            # returns, they should already be.
            from workers.storage import chunk_index

            chunk_index.refresh(config)
    failed, pending = _report(collection, run, tracker, listing, skipped, no_wait, json_output)
    refused = _sync(collection, paths, seen, listing, skipped, dry_run=False, force=force,
                    json_output=json_output) if sync else False
    if failed or pending or refused:
        raise typer.Exit(1)


def _report(collection: str, run: str, tracker: Any, listing: Any, skipped: Any, no_wait: bool,
            json_output: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """The ingest's summary, printed or as JSON; (failed, still pending)."""
    counts, failed = tracker.counts, tracker.failed
    pending = [] if no_wait else sorted(tracker.pending)
    unchanged = counts["unchanged"]
    summary = {"collection": collection, "run": run, "documents": counts["submitted"], "unchanged": unchanged,
               "s3_skipped": listing.skipped,
               "indexed": counts["indexed"] + unchanged,
               "queued": len(tracker.pending) if no_wait else 0,
               "failed": [{"doc_id": d["doc_id"], "error": d.get("error")} for d in failed],
               "pending": pending,
               "skipped": {"count": skipped.count, "by_reason": skipped.by_reason}}
    if json_output:
        print(json.dumps(summary))
        return failed, pending
    verb = "queued" if no_wait else "indexed"
    out.print(f"{safe(collection)}: {counts['submitted']} documents, "
              f"{summary['queued'] if no_wait else summary['indexed']} {verb} "
              f"({unchanged} unchanged), {len(failed)} failed"
              + (f", {skipped.count} skipped" if skipped.count else "")
              + (f"; {listing.skipped} S3 objects unchanged since last time, not read" if listing.skipped else "")
              + (f", {len(pending)} still pending" if pending else ""))
    for d in failed:
        out.print(f"  [red]failed[/red] {safe(d['doc_id'])}: {safe(d.get('error'))}", highlight=False)
    for reason, rels in skipped.by_reason.items():
        shown = ", ".join(safe(r) for r in rels[:10]) + (f" and {len(rels) - 10} more" if len(rels) > 10 else "")
        out.print(f"  [yellow]skipped[/yellow] {len(rels)} ({safe(reason)}): {shown}", highlight=False)
    return failed, pending


def _sync(collection: str, paths: list[str], seen: dict[str, set[str]], listing: Any, skipped: Any, dry_run: bool,
          force: bool, json_output: bool) -> bool:
    """Delete (or list) each source's documents that the pass did not find; True if refused."""
    from producers.ingest import sync as sync_

    kept_anyway = {p for rels in skipped.by_reason.values() for p in rels} | listing.present
    plans = [sync_.plan(collection, source, found | kept_anyway) for source, found in seen.items()]
    refusals = [p.refused for p in plans if p.refused and not force]
    report: list[dict[str, Any]] = []
    for p in plans:
        deleted = 0 if dry_run or refusals else sync_.delete(collection, p.gone)
        report.append({"source": p.source, "tracked": p.tracked, "gone": p.gone, "deleted": deleted})
    if json_output:
        print(json.dumps({"sync": report, "refused": refusals, "dry_run": dry_run}))
    else:
        for r in report:
            verb = "would delete" if dry_run or refusals else "deleted"
            out.print(f"{safe(r['source'])}: {len(r['gone'])} of {r['tracked']} documents gone from it; "
                      f"{verb} {len(r['gone']) if dry_run or refusals else r['deleted']}", highlight=False)
            for doc_id in r["gone"][:50]:
                out.print(f"  - {safe(doc_id)}", highlight=False)
        for message in refusals:
            err.print(f"[red]refused:[/red] {safe(message)}", highlight=False)
    return bool(refusals)


def _print_estimate(collection: str, requested: dict[str, Any], documents: Iterable[Any], json_output: bool) -> None:
    from producers.ingest.estimate import estimate
    from workers import lifecycle
    from workers.errors import CollectionError

    try:
        config = lifecycle.planned(collection, **requested)
    except (CollectionError, ValueError) as error:
        fail(str(error))
    show_estimate(estimate(config, documents), json_output)


def read_text_file(path: Path | None) -> str | None:
    """A glossary's or a prompt's file, as text (None: not given)."""
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        fail(f"{path}: {e}")


def show_estimate(e: Any, json_output: bool) -> None:
    """An ``Estimate`` (producers.ingest.estimate) for people, or as JSON."""
    if json_output:
        print(json.dumps(e.to_json()))
        return
    out.print(f"{e.collection}: {e.documents:,} documents ({e.failing} would fail), {e.chunks:,} chunks, "
              f"contextualizer {e.contextualizer}" + (f" ({e.model})" if e.model else ""), highlight=False)
    if e.reused:
        out.print(f"{e.reused:,} contexts reused from the live generation: no call for them", highlight=False)
    if not e.calls:
        out.print("no LLM call: nothing to pay", highlight=False)
        return
    if e.long_documents:
        out.print(f"{e.long_documents:,} long documents (over SITUATE_LLM_MAX_DOCUMENT_TOKENS) read as their opening "
                  f"and {e.windows:,} section windows, each cached once", highlight=False)
    out.print(f"calls {e.calls:,}; tokens: input {e.input_tokens:,}, cache write {e.cache_write_tokens:,}, "
              f"cache read {e.cache_read_tokens:,} ({e.cache_read_ratio:.1%} of prompt tokens), output "
              f"{e.output_tokens:,} ({e.output_per_call:.0f} per call)", highlight=False)
    out.print(f"characters per token {e.block_chars_per_token:.2f} (documents), {e.rest_chars_per_token:.2f} "
              f"(chunks); measured on this deployment's calls: {', '.join(e.measured) or 'nothing yet'} "
              "(the rest from the model table and a default: estimates improve after a first run)", highlight=False)
    per_million = e.cost_per_million_document_tokens
    pace = (f"at the rate limits ({e.limits['rpm']:,} rpm, {e.limits['itpm']:,} input and {e.limits['otpm']:,} "
            f"output tokens/min) at least {e.minutes_at_rate_limits:.1f} min, bound by {e.binding_limit}"
            if e.limits else "no account limits (servers of your own): the time is your replicas' prefill and decode")
    out.print(f"cost ${e.cost_usd:,.4f} (without prompt caching ${e.cost_without_cache_usd:,.4f}"
              + (f"; ${per_million:,.3f} per million document tokens" if per_million else "") + f"); {pace}",
              highlight=False)


def drop(collection: str = typer.Option(..., "--collection", "-c"),
         yes: bool = typer.Option(False, "--yes", help="Do not ask.")) -> None:
    """Delete a collection: its tokens, index, settings and document states. A drop cut short
    (OpenSearch unreachable) is finished by running it again."""
    from workers import lifecycle
    from workers.storage import catalog, chunk_index

    try:
        listed = catalog.find(collection) is not None
        unfinished = not listed and catalog.dropping(collection) is not None
        left = [] if listed or unfinished else chunk_index.left_behind(collection)
    except errors.CollectionError as e:
        fail(str(e))
    except Exception as e:  # OpenSearch unreachable: what it holds cannot be told
        fail(f"{collection}: not listed, and OpenSearch could not be asked for an index it left behind "
             f"({type(e).__name__}: {e})", 1)
    if not (unfinished or left):
        existing(collection)
    question = f"delete collection {collection!r} and its index?" if not left else \
        f"no collection {collection!r} is listed, but its index is left behind: delete {', '.join(left)}?"
    if not yes and not typer.confirm(question):
        raise typer.Exit(1)
    try:
        if left:
            left = lifecycle.delete_left_behind(collection)
        else:
            lifecycle.delete(collection)
    except errors.CollectionError as e:
        fail(str(e))
    except Exception as e:  # OpenSearch or Redis unreachable: the tombstone keeps the rest for later
        fail(f"{collection}: the drop did not finish ({type(e).__name__}: {e}); run it again to finish", 1)
    if left:
        out.print(f"no collection {safe(collection)} was listed; deleted the index it left behind: {', '.join(left)}",
                  highlight=False)
        return
    out.print(f"dropped {safe(collection)}" + (" (an unfinished drop, now finished)" if unfinished else ""),
              highlight=False)


def delete(ids: list[str] = typer.Argument(..., help="Document ids."),
           collection: str = typer.Option(..., "--collection", "-c")) -> None:
    """Delete documents: from the index and from Redis (exit 1 if one was not there)."""
    from workers import lifecycle

    existing(collection)
    missing = [doc_id for doc_id in ids if not lifecycle.delete_document(collection, doc_id)]
    out.print(f"{safe(collection)}: {len(ids) - len(missing)} deleted"
              + (f", not found: {', '.join(safe(m) for m in missing)}" if missing else ""), highlight=False)
    if missing:
        raise typer.Exit(1)


def failed(collection: str = typer.Option(..., "--collection", "-c"),
           limit: int = typer.Option(100, help="At most this many (a page)."),
           offset: int = typer.Option(0, min=0, help="Skip this many: the next page starts at offset + limit."),
           json_output: bool = typer.Option(False, "--json")) -> None:
    """Failed documents, newest first, with their reasons: a page at a time."""
    from workers.storage import states

    existing(collection)
    ids, total = states.failed_ids(collection, offset, limit)
    rows = [d for d in states.get_many(collection, ids) if d]
    if json_output:
        print(json.dumps([{"doc_id": d["doc_id"], "error": d["error"]} for d in rows]))
        return
    for d in rows:
        out.print(f"[red]failed[/red] {safe(d['doc_id'])}: {safe(d['error'])}", highlight=False)
    more = f"; the next page: --offset {offset + limit}" if offset + len(rows) < total else ""
    out.print(f"{total:,} failed, {offset + 1 if rows else 0}-{offset + len(rows)} shown{more}")


def retry(ids: list[str] = typer.Argument(None, help="Document ids (default: every failed one)."),
          collection: str = typer.Option(..., "--collection", "-c"),
          no_wait: bool = typer.Option(False, "--no-wait"),
          json_output: bool = typer.Option(False, "--json")) -> None:
    """Queue failed documents again; contexts already paid for are not paid twice."""
    from producers.ingest import submit
    from workers.storage import states

    config = existing(collection)
    retried = submit.retry_failed(config, ids or None)
    queued = [r for r in retried if r.outcome == "queued"]
    final = {}
    if queued and not no_wait:
        final = submit.wait(config, [submit.Submission(r.doc_id, "queued",
                                                       (states.get(collection, r.doc_id) or {}).get("version"))
                                     for r in queued])
    rows = [{"doc_id": r.doc_id, "retry": r.outcome, "state": final.get(r.doc_id, {}).get("state"),
             "error": final.get(r.doc_id, {}).get("error") or (r.error if r.outcome != "queued" else None)}
            for r in retried]
    if json_output:
        print(json.dumps(rows))
    else:
        for row in rows:
            out.print(f"{safe(row['doc_id'])}: {row['retry']}" + (f" -> {row['state']}" if row["state"] else "")
                      + (f" ({safe(row['error'])})" if row["error"] else ""), highlight=False)
    if any(row["state"] == "failed" or row["retry"] == "body gone" for row in rows):
        raise typer.Exit(1)
