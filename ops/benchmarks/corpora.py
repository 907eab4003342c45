"""``ops/bench corpora``: the offline defaults against plain chunks, on every public corpus.

Each labelled corpus in ``../shared/data`` (the cookbook's code, English technical prose,
French, FinanceBench's filings and MMLongBench's reports, papers and guidebooks as PDFs) is
ingested twice with the settings a new user gets —
plain chunks (``--contextualizer none``) and the defaults (no flag but ``--language`` where the
text is not English) — then evaluated in one report: a table per corpus and a summary (``situate
eval --suites``). This is the check every retrieval change must pass on all of them, not on one.
The PDF corpora are folders, ingested as a user's folder is (extracted by the workers) and
graded by page (page@k, doc@k; MMLongBench also per document type); the run prints its extraction rate and its chunks/s beside the
bare embedder's on the same texts.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml

from ops.benchmarks.common import DATA
from ops.harness import ROOT, SITUATE, Worker

CORPORA = {  # name -> language a user would declare
    "cookbook": "english",
    "tech_faq_en": "english",
    "debian_faq_fr": "french",
    "financebench": "english",
    "mmlongbench": "english",
}
FOLDERS = {"financebench": "pdfs", "mmlongbench": "pdfs"}  # corpora that are folders of files, not chunked JSON
QUERIES = {"financebench": ("queries.jsonl", "jsonl"), "mmlongbench": ("queries.jsonl", "jsonl")}


def labels(corpus: str) -> tuple[Path, str]:
    """A corpus's labelled questions and their format for ``situate eval --format``."""
    name, fmt = QUERIES.get(corpus, ("evaluation_set.jsonl", "cookbook"))
    return DATA / corpus / name, fmt


def ingest(collection: str, corpus: str, flags: list[str]) -> float:
    started = time.perf_counter()
    source = ["--format", "cookbook", str(DATA / corpus / "codebase_chunks.json")] if corpus not in FOLDERS \
        else [str(DATA / corpus / FOLDERS[corpus])]
    subprocess.run([SITUATE, "ingest", "-c", collection, *flags, *source], check=True, stdout=subprocess.DEVNULL,
                   timeout=7200)
    return time.perf_counter() - started


def bench_corpora(args) -> None:
    report = Path(args.report)
    report.mkdir(parents=True, exist_ok=True)
    suites, timings = {}, {}
    worker = Worker(2, name="bench-corpora")
    chosen = [c for c in CORPORA if not args.only or c in args.only.split(",")]
    try:
        for corpus in chosen:
            language = CORPORA[corpus]
            if not (DATA / corpus / FOLDERS.get(corpus, "codebase_chunks.json")).exists():
                sys.exit(f"corpus {corpus} not found in {DATA}")
            language_flag = [] if language == "english" else ["--language", language]
            plain, default = f"{args.prefix}{corpus}-plain".replace("_", "-"), f"{args.prefix}{corpus}".replace("_", "-")
            for name in (plain, default):  # what a new user gets: fresh collections
                subprocess.run([SITUATE, "drop", "-c", name, "--yes"], capture_output=True)
            timings[plain] = ingest(plain, corpus, ["--contextualizer", "none", *language_flag])
            timings[default] = ingest(default, corpus, language_flag)
            queries, fmt = labels(corpus)
            suites[corpus] = {"queries": str(queries), "format": fmt,
                              "collections": {"plain": plain, "default": default}}
    finally:
        worker.stop()
    path = report / "suites.yaml"
    path.write_text(yaml.safe_dump(suites, sort_keys=False))
    for name, seconds in timings.items():
        chunks = _chunks(name)
        print(f"ingested {name} in {seconds:.0f} s: {chunks:,} chunks, {chunks / seconds:.1f} chunks/s", flush=True)
    if "financebench" in chosen:
        _financebench_rates(f"{args.prefix}financebench", timings[f"{args.prefix}financebench"])
    subprocess.run([SITUATE, "eval", "--suites", str(path), "--report", str(report)], check=True, cwd=ROOT)
    print(f"report: {report / 'report.md'}")


def _chunks(collection: str) -> int:
    from workers.storage import catalog, chunk_index

    return chunk_index.count(catalog.load(collection))


def _financebench_rates(collection: str, ingest_s: float) -> None:
    """Extraction pages/s on one core (the sandbox, as the workers run it), and the ingest's
    chunks/s beside the bare embedder's on 1,000 of the same chunks, in this run."""
    from opensearchpy import helpers

    from workers.connections import opensearch_client
    from workers.embedding import registry as embedders
    from workers.extraction import sandbox
    from workers.extraction.limits import Limits
    from workers.storage import catalog

    # One sandbox child on an otherwise idle machine: its wall time is one core's.
    pages, wall = 0, time.perf_counter()
    for pdf in sorted((DATA / "financebench" / "pdfs").glob("*.pdf")):
        pages += sandbox.extract(pdf.read_bytes(), "application/pdf", pdf.name, Limits.from_settings()).pages_total
    wall = time.perf_counter() - wall
    print(f"extraction: {pages:,} pages in {wall:.1f} s, {pages / wall:.0f} pages/s (one sandbox process)", flush=True)
    config = catalog.load(collection)
    texts = [h["_source"]["text"] for _, h in zip(range(1000), helpers.scan(
        opensearch_client(), index=config.index_name, query={"query": {"match_all": {}}}, _source=["text"]))]
    embedder = embedders.get(config.embedder, config.embed_model)
    embedder.embed_documents(texts[:32])
    t0 = time.perf_counter()
    embedder.embed_documents(texts)
    bare = len(texts) / (time.perf_counter() - t0)
    ingest = _chunks(collection) / ingest_s
    print(f"financebench ingest end to end {ingest:.1f} chunks/s; bare embedder {bare:.1f} chunks/s on the same "
          f"chunks; ratio {ingest / bare:.2f}", flush=True)
