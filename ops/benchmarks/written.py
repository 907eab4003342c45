"""``ops/bench written``: contexts written by a model, measured against plain chunks and the offline
default in one run.

Each GGUF file given (``--model-file``, repeatable) is served by llama.cpp's own server
(``llama-server``, built by ops/setup with the ``llama`` extra) as ``--replicas`` replicas on this
machine's CPU, and situated through the ``openai`` contextualizer, its documents routed to one
replica each, as a fleet of your own would run. The same documents are also ingested as plain
chunks (``--contextualizer none``) and with the offline default, and all are evaluated in one
report (``situate eval --suites``): the cookbook's Pass@k on its code, page@k on a part of the
public MMLongBench PDFs. On two cores a small model takes seconds a chunk: ``--cookbook-documents``
and ``--mmlongbench-documents`` choose the subsets (the cookbook's first N files, MMLongBench's N
shortest PDFs), and only the queries whose gold lies in them are asked. The run prints each
model's time, its calls and what its servers read from their caches.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from ops.benchmarks.common import DATA
from ops.harness import ROOT, SITUATE, Worker
from ops.model_servers import LlamaServers


def cookbook_subset(folder: Path, n: int) -> tuple[Path, Path]:
    files = json.loads((DATA / "cookbook" / "codebase_chunks.json").read_text())[:n]
    kept = {f["original_uuid"] for f in files}
    corpus = folder / "cookbook.json"
    corpus.write_text(json.dumps(files))
    queries = folder / "cookbook-queries.jsonl"
    with queries.open("w") as out:
        for raw in (DATA / "cookbook" / "evaluation_set.jsonl").read_text().splitlines():
            q = json.loads(raw)
            if set(q["golden_doc_uuids"]) <= kept:
                out.write(raw + "\n")
    return corpus, queries


def mmlongbench_subset(folder: Path, n: int) -> tuple[Path, Path]:
    import pypdfium2

    source = DATA / "mmlongbench"
    pages = {p.name: len(pypdfium2.PdfDocument(str(p))) for p in sorted((source / "pdfs").glob("*.pdf"))}
    chosen = sorted(pages, key=lambda name: (pages[name], name))[:n]
    pdfs = folder / "pdfs"
    pdfs.mkdir()
    for name in chosen:
        shutil.copy(source / "pdfs" / name, pdfs / name)
    queries = folder / "mmlongbench-queries.jsonl"
    with queries.open("w") as out:
        for raw in (source / "queries.jsonl").read_text().splitlines():
            if {g["doc_id"] for g in json.loads(raw)["gold"]} <= set(chosen):
                out.write(raw + "\n")
    return pdfs, queries


def _ingest(collection: str, source: list[str], flags: list[str], env: dict[str, str] | None = None) -> float:
    subprocess.run([SITUATE, "drop", "-c", collection, "--yes"], capture_output=True)
    started = time.perf_counter()
    # A document that fails (a prompt over a server's window) fails alone: counted in the row, and
    # its queries count as misses for that collection, as they would for a user.
    subprocess.run([SITUATE, "ingest", "-c", collection, *flags, *source], stdout=subprocess.DEVNULL,
                   timeout=6 * 3600, env={**os.environ, **(env or {})})
    return time.perf_counter() - started


def _failed(collection: str) -> int:
    out = subprocess.run([SITUATE, "status", "-c", collection, "--json"], capture_output=True, text=True, check=True)
    found = json.loads(out.stdout)
    return int(next(c for c in found["collections"] if c["collection"] == collection)["documents"].get("failed", 0))


def _bill(collection: str) -> dict[str, Any]:
    out = subprocess.run([SITUATE, "stats", "-c", collection, "--json"], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout)["collections"][collection]["total"])


def bench_written(args: Any) -> None:
    report = Path(args.report)
    report.mkdir(parents=True, exist_ok=True)
    models = [Path(m) for m in args.model_file]
    for m in models:
        if not m.is_file():
            raise SystemExit(f"no GGUF file {m}")
    suites: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        corpora: dict[str, tuple[list[str], Path, str]] = {}
        if args.cookbook_documents:
            corpus, queries = cookbook_subset(Path(tmp), args.cookbook_documents)
            corpora["cookbook"] = (["--format", "cookbook", str(corpus)], queries, "cookbook")
        if args.mmlongbench_documents:
            pdfs, queries = mmlongbench_subset(Path(tmp), args.mmlongbench_documents)
            corpora["mmlongbench"] = ([str(pdfs)], queries, "jsonl")
        for name, (_, queries, _) in corpora.items():
            print(f"{name}: {sum(1 for _ in queries.open())} queries", flush=True)
        worker = Worker(2, name="bench-written-offline")
        try:
            for name, (source, queries, fmt) in corpora.items():
                plain, default = f"{args.prefix}{name}-plain", f"{args.prefix}{name}-default"
                _ingest(plain, source, ["--contextualizer", "none"])
                _ingest(default, source, [])
                suites[name] = {"queries": str(queries), "format": fmt, "collections": {"plain": plain, "default": default}}
        finally:
            worker.stop()
        for model in models:
            label = model.stem.lower().replace("_", "-").replace(".", "-")[:24]
            servers = LlamaServers(model, n=args.replicas, slots=args.slots, context=args.context * args.slots,
                                   threads=args.threads, ready_timeout=600)
            env = {"SITUATE_OPENAI_BASE_URLS": servers.urls, "SITUATE_OPENAI_REPLICA_CONCURRENCY": str(args.slots),
                   "SITUATE_LLM_DOCUMENT_CONCURRENCY": "1", "SITUATE_OPENAI_CONTEXT_TOKENS": str(args.context),
                   "SITUATE_LLM_TIMEOUT_S": "1800", "SITUATE_LLM_MAX_OUTPUT_TOKENS": "120"}
            workers = [Worker(args.replicas * args.slots, ["--pool", "threads"], env,
                              name=f"bench-written-{uuid.uuid4().hex[:4]}")]
            try:
                for name, (source, _, _) in corpora.items():
                    collection = f"{args.prefix}{name}-{label}"
                    seconds = _ingest(collection, source, ["--contextualizer", "openai", "--model", label], env)
                    bill = _bill(collection)
                    row = {"corpus": name, "model": model.name, "collection": collection, "seconds": round(seconds),
                           "failed_documents": _failed(collection),
                           "calls": bill["calls"], "seconds_per_call": round(seconds / max(1, bill["calls"]), 2),
                           "prompt_tokens": bill["input_tokens"] + (bill["cache_read_tokens"] or 0),
                           "cache_read_tokens": bill["cache_read_tokens"], "of_best": bill["of_best"],
                           "output_tokens": bill["output_tokens"]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    suites[name]["collections"][label] = collection
            finally:
                for w in workers:
                    w.stop()
                servers.close()
        path = report / "suites.yaml"
        path.write_text(yaml.safe_dump(suites, sort_keys=False))
        subprocess.run([SITUATE, "eval", "--suites", str(path), "--report", str(report)], check=True, cwd=ROOT)
    for r in rows:
        read = (r["cache_read_tokens"] or 0) / r["prompt_tokens"] if r["prompt_tokens"] else 0.0
        print(f"{r['corpus']:12} {r['model']:40} {r['seconds']:6d} s {r['calls']:5d} calls "
              f"{r['seconds_per_call']:6.2f} s/call, {read:.1%} of prompt tokens read from the servers' caches")
    print(f"report: {report / 'report.md'}")
