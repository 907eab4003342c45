"""``ops/bench compaction``: what merging an index into few segments (``situate compact``) does to
retrieval, on every public corpus that ``ops/bench corpora`` has built: Pass@10, page@10 and
MRR@10 of hybrid search before and after the merge, in the same run, beside the segments and the
seconds the merge took. Its speed is ``ops/bench clients``'.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

from ops.benchmarks.corpora import CORPORA, labels
from ops.harness import SITUATE


def grade(collection: str, queries: str, fmt: str) -> dict[str, Any]:
    done = subprocess.run([SITUATE, "eval", "-c", collection, "--queries", queries, "--format", fmt,
                           "--configs", "hybrid", "--json"], capture_output=True, text=True, check=True, timeout=3600)
    row = json.loads(done.stdout)["results"][0]
    return {k: row[k] for k in ("pass@10", "page@10", "mrr@10") if k in row}


def bench_compaction(args: Any) -> None:
    from workers.storage import catalog, compaction

    rows = []
    for corpus in [c for c in CORPORA if not args.only or c in args.only.split(",")]:
        queries, fmt = labels(corpus)
        for collection in (f"{args.prefix}{corpus}-plain".replace("_", "-"), f"{args.prefix}{corpus}".replace("_", "-")):
            config = catalog.find(collection)
            if config is None:
                print(f"{collection}: not built (ops/bench corpora builds it); skipped", flush=True)
                continue
            before = grade(collection, str(queries), fmt)
            started = time.perf_counter()
            merged = compaction.compact(config.index_name)
            assert merged is not None
            before_shape, after_shape = merged
            merge_s = time.perf_counter() - started
            after = grade(collection, str(queries), fmt)
            row = {"collection": collection, "chunks": after_shape.documents, "segments_before": before_shape.segments,
                   "segments_after": after_shape.segments, "merge_s": round(merge_s, 1), "before": before, "after": after}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{'collection':32} {'chunks':>7} {'segments':>9} {'merge s':>8}  metric: before -> after")
    for r in rows:
        metrics = ", ".join(f"{k} {r['before'][k]} -> {r['after'][k]}" for k in r["before"])
        print(f"{r['collection']:32} {r['chunks']:7d} {r['segments_before']:4d} -> {r['segments_after']:<2d} "
              f"{r['merge_s']:8.1f}  {metrics}")
    changed = [r["collection"] for r in rows if r["before"] != r["after"]]
    print(f"unchanged on {len(rows) - len(changed)} of {len(rows)} collections" + (f"; changed: {changed}" if changed else ""))
