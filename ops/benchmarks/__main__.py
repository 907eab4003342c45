"""Benchmarks: run by ``ops/bench``; each prints its figures and the reference it is compared
with, measured in the same run on the same machine.

    pipeline  ingest chunks/s against the embedder's own passages/s; --embedders a,b side by side (retrieval)
    search    search latency and Pass@k through the HTTP API            (retrieval)
    situate   cache reads, cost, scaling and rate limits against the stand-in LLM (situate)
    memory    Redis memory through a 10,000-document run                 (memory)
    corpora   the offline defaults against plain chunks on every public corpus (corpora)
    llm-cost  Claude's bill per million document tokens, cookbook and FinanceBench (llm_cost)
    extractors  PDF libraries on the filings: pages/s, and plain BM25 page@10 of their text (extractors)
    reconcile  a reconciler pass's Redis time at 10k, 100k and 1M documents in flight (reconcile)
    scale     100,000 chunks: throughput, memory, index, search at 1k/10k/100k; 1-8 workers (scale)
    reindex   a reindex to another embedder against a fresh ingest with it, searches running through it (reindex)
    vectors   vector storages: Pass@10 and bytes per chunk on the cookbook, recall@10 at 100k vectors (reindex)
    hostile   what a hostile tenant's files cost the others: time, Redis, the API's memory (hostile)
    checkpoints  a context checkpoint's latency with and without a replica confirming it (checkpoints)
    search-page  the search page's latency, its page images' and their memory, on FinanceBench (search_page)
    control   status, failed, /metrics, the dashboard, the listing, a reconciler pass at 10k-1M documents (control)
    clients   search through the API with 1, 4 and 16 clients, the index as written and merged: q/s, p50/p95, its parts (clients)
    compaction  Pass@10, page@10 and MRR@10 of every public corpus before and after its index is merged (compaction)
    fleet     round trips per document and stage, chunks/s with 1 and 5 ms added each way (fleet; root, namespaces)
    index     hybrid search at 100k and 1M chunks, 1 and 16 clients, OpenSearch's memory, float and byte (index)
    tiny      one-chunk documents through the whole pipeline: docs/s by tenth, Redis and RSS per document (tiny)
    notes     one-line notes offline, each alone and in bundles, against the embedder alone (tiny)
    batches   Message Batches grouped: cost against one batch a document, 10,000 documents at the first tier (batches)
    commands  Redis commands per chunk and per document over cookbook documents, counted by Redis (commands)
    written   contexts a model wrote (GGUF files on llama-server replicas) against plain chunks and the default (written)
    pilot     situate pilot on public PDFs offline (the time to its table); generated questions against labels (pilot)
    replicas  the openai contextualizer on 1-8 replicas: affinity, round robin, least-loaded; one killed, one added (replicas)

``ops/bench --record NAME …`` also writes the run's output into NAME's section of
docs/benchmarks.md (``record``): the one place measured figures live.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("SITUATE_ALLOWED_MODELS", "*")  # the cookbook's model, against the stand-in
os.environ.setdefault("SITUATE_ALLOWED_EMBEDDERS", "*")
os.environ.setdefault("SITUATE_ALLOWED_RERANKERS", "*")

from ops.benchmarks import (
    batches,
    checkpoints,
    clients,
    commands,
    compaction,
    control,
    corpora,
    extractors,
    fleet,
    hostile,
    index,
    llm_cost,
    memory,
    pilot,
    reconcile,
    record,
    reindex,
    replicas,
    retrieval,
    scale,
    search_page,
    situate,
    tiny,
    written,
)


def main() -> None:
    if "--record" in sys.argv[1:]:  # run it, then write what it printed into docs/benchmarks.md
        args = [a for a in sys.argv[1:] if a != "--record"]
        sys.exit(record.record(args, [sys.executable, "-m", "ops.benchmarks", *args]))
    parser = argparse.ArgumentParser(prog="ops/bench", epilog="--record (anywhere): write the run's output into "
                                     "its section of docs/benchmarks.md, with the date, the machine and the command")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pipeline")
    p.add_argument("--contextualizer", default="structural")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--embedders", default="", help="comma-separated, each its own run (default: a new collection's); "
                   "NAME:N embeds N texts per encoder call (0.2: 32)")
    p.set_defaults(fn=retrieval.bench_pipeline)
    s = sub.add_parser("search")
    s.add_argument("--collection", default="cookbook")
    s.add_argument("--queries", default="", help="labelled queries (cookbook format; default: the cookbook's)")
    s.set_defaults(fn=retrieval.bench_search)
    b = sub.add_parser("situate")
    b.add_argument("--limit-only", action="store_true", help="only the demand and half-demand runs")
    b.set_defaults(fn=situate.bench_situate)
    m = sub.add_parser("memory")
    m.add_argument("--documents", type=int, default=10_000)
    m.add_argument("--workers", type=int, default=2)
    m.set_defaults(fn=memory.bench_memory)
    c = sub.add_parser("corpora")
    c.add_argument("--report", default=str(Path(__file__).resolve().parents[2] / ".services" / "report-corpora"))
    c.add_argument("--prefix", default="bench-", help="collection names' prefix (they are dropped and rebuilt)")
    c.add_argument("--only", default="", help="comma-separated corpora (default: all of them)")
    c.set_defaults(fn=corpora.bench_corpora)
    lc = sub.add_parser("llm-cost")
    lc.add_argument("--only", default="", help="cookbook, financebench (default: both)")
    lc.set_defaults(fn=llm_cost.bench_llm_cost)
    ex = sub.add_parser("extractors")
    ex.set_defaults(fn=extractors.bench_extractors)
    rc = sub.add_parser("reconcile")
    rc.set_defaults(fn=reconcile.bench_reconcile)
    sc = sub.add_parser("scale")
    sc.add_argument("--chunks", type=int, default=100_000)
    sc.add_argument("--keep", action="store_true", help="keep the collection (default: dropped)")
    sc.add_argument("--skip-workers", action="store_true", help="no 1/2/4/8-worker LLM runs")
    sc.set_defaults(fn=scale.bench_scale)
    ri = sub.add_parser("reindex")
    ri.add_argument("--llm", action="store_true", help="the cookbook situated by the stand-in Claude, to Voyage")
    ri.set_defaults(fn=reindex.bench_reindex)
    ve = sub.add_parser("vectors")
    ve.add_argument("--vectors", type=int, default=100_000, help="synthetic vectors per storage")
    ve.add_argument("--synthetic-only", action="store_true", help="only the synthetic vectors, not the cookbook")
    ve.set_defaults(fn=reindex.bench_vectors)
    cp = sub.add_parser("checkpoints")
    cp.set_defaults(fn=checkpoints.bench_checkpoints)
    ho = sub.add_parser("hostile")
    ho.set_defaults(fn=hostile.bench_hostile)
    sp = sub.add_parser("search-page")
    sp.add_argument("--collection", default="bench-financebench", help="ingested from the filings if missing")
    sp.set_defaults(fn=search_page.bench_search_page)
    co = sub.add_parser("control")
    co.add_argument("--documents", type=int, default=1_000_000, help="the largest of 10k, 100k, 1M to reach")
    co.set_defaults(fn=control.bench_control)
    cl = sub.add_parser("clients")
    cl.add_argument("--collection", default="bench-financebench", help="ingested from the filings if missing")
    cl.add_argument("--api-workers", type=int, default=1)
    cl.add_argument("--seconds", type=float, default=20)
    cl.add_argument("--sweep", action="store_true", help="OpenSearch alone at 16 clients, one request shape at a time")
    cl.add_argument("--reference-candidates", type=int, default=0,
                    help="each load also run with this many candidates a side (0: not)")
    cl.add_argument("--no-compact", action="store_true", help="the index as written only (not merged after)")
    cl.set_defaults(fn=clients.bench_clients)
    cm = sub.add_parser("compaction")
    cm.add_argument("--prefix", default="bench-", help="the collections' prefix (ops/bench corpora's)")
    cm.add_argument("--only", default="", help="comma-separated corpora (default: all)")
    cm.set_defaults(fn=compaction.bench_compaction)
    fl = sub.add_parser("fleet")
    fl.add_argument("--documents", type=int, default=60)
    fl.add_argument("--chunks", type=int, default=4, help="chunks per document")
    fl.add_argument("--concurrency", type=int, default=2, help="pool processes of the chunk and index workers")
    fl.set_defaults(fn=fleet.bench_fleet)
    ix = sub.add_parser("index")
    ix.add_argument("--chunks", type=int, default=1_000_000, help="the largest of 100k, 1M to reach")
    ix.add_argument("--vectors", default="", help="storages to run, comma-separated (default: float,byte)")
    ix.set_defaults(fn=index.bench_index)
    ti = sub.add_parser("tiny")
    ti.add_argument("--documents", type=int, default=100_000)
    ti.add_argument("--backlog-mb", type=int, default=4, help="the producer's backlog budget")
    ti.add_argument("--bundles", type=lambda s: [int(x) for x in s.split(",")], default=[1, 32],
                    help="SITUATE_BUNDLE_MAX_DOCUMENTS of each run, in turn (1: each document alone)")
    ti.set_defaults(fn=tiny.bench_tiny)
    no = sub.add_parser("notes")
    no.add_argument("--documents", type=int, default=3000)
    no.add_argument("--concurrency", type=int, default=2, help="pool processes of the one worker")
    no.add_argument("--bundle", type=int, default=32, help="SITUATE_BUNDLE_MAX_DOCUMENTS of the bundled run")
    no.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[16, 32],
                    help="the embedder alone's batch sizes beside one at a time")
    no.set_defaults(fn=tiny.bench_notes)
    ba = sub.add_parser("batches")
    ba.add_argument("--documents", type=int, default=10_000, help="documents at the first tier's limits")
    ba.add_argument("--cost-documents", type=int, default=300, help="documents in each cost run")
    ba.set_defaults(fn=batches.bench_batches)
    cm = sub.add_parser("commands")
    cm.add_argument("--documents", type=int, default=90, help="cookbook documents (of 90)")
    cm.add_argument("--workers", type=int, default=1)
    cm.add_argument("--concurrency", type=int, default=2)
    cm.set_defaults(fn=commands.bench_commands)
    wr = sub.add_parser("written")
    wr.add_argument("--model-file", action="append", required=True, help="a GGUF file (repeat for several models)")
    wr.add_argument("--cookbook-documents", type=int, default=90, help="the cookbook's first N files (0: none)")
    wr.add_argument("--mmlongbench-documents", type=int, default=10, help="MMLongBench's N shortest PDFs (0: none)")
    wr.add_argument("--replicas", type=int, default=2)
    wr.add_argument("--slots", type=int, default=2, help="each replica's -np")
    wr.add_argument("--threads", type=int, default=1, help="each replica's -t")
    wr.add_argument("--context", type=int, default=8192, help="tokens per slot")
    wr.add_argument("--prefix", default="bench-written-")
    wr.add_argument("--report", default=str(Path(__file__).resolve().parents[2] / ".services" / "report-written"))
    wr.set_defaults(fn=written.bench_written)
    pi = sub.add_parser("pilot")
    pi.add_argument("--count", type=int, default=40, help="questions the pilot generates on the PDFs")
    pi.add_argument("--agreement", default="cookbook,financebench,mmlongbench",
                    help="corpora where generated questions are checked against the labels")
    pi.add_argument("--agreement-count", type=int, default=100, help="chunks asked about on each, with each prompt")
    pi.add_argument("--skip-pdfs", action="store_true", help="only the ranking check")
    pi.set_defaults(fn=pilot.bench_pilot)
    rp = sub.add_parser("replicas")
    rp.add_argument("--documents", type=int, default=200, help="documents of ~3,000 tokens in the 4-replica runs")
    rp.add_argument("--sweep-documents", type=int, default=100, help="documents in the 1, 2 and 8-replica runs")
    rp.add_argument("--quick", action="store_true", help="4 replicas only (no 1/2/8 sweep)")
    rp.set_defaults(fn=replicas.bench_replicas)
    args = parser.parse_args()
    args.fn(args)


if __name__ == "__main__":
    main()
