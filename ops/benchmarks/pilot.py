"""``ops/bench pilot``: ``situate pilot`` as a user runs it, offline, on public documents.

1. **A folder of PDFs to a before/after table with intervals**: ``situate pilot`` on MMLongBench's
   public PDFs (``--sample 50``: all 22), the packaged Qwen2.5-Coder-0.5B writing the questions
   through ``llama`` on this machine's CPU; the time from the command to its table (target: at most
   10 minutes on 2 cores).
2. **Do generated questions rank configurations as people's labels do?** On the cookbook corpus,
   plain chunks and the offline default, evaluated with the cookbook's own labels and with questions
   the same model generated: both orders printed, and whether they agree.

The model file must be where ``llama`` looks (``situate models fetch --gguf qwen2.5-coder-0.5b``,
or ``SITUATE_MODELS_DIR``); the benchmark fetches it when missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ops.benchmarks.common import DATA
from ops.harness import ROOT, SITUATE, Worker


def _run(args: list[str], timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SITUATE, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "COLUMNS": "200"})


def bench_pilot(args: Any) -> None:
    from workers.contextualizers import gguf

    if gguf.path(gguf.DEFAULT) is None:
        print(f"fetching {gguf.DEFAULT} (situate models fetch --gguf {gguf.DEFAULT})", flush=True)
        gguf.fetch(gguf.DEFAULT)
    if not args.skip_pdfs:
        for name in ("bench-pilot-mmlb", "bench-pilot-mmlb-plain"):
            _run(["drop", "-c", name, "--yes"])
        started = time.perf_counter()
        done = _run(["pilot", str(DATA / "mmlongbench" / "pdfs"), "--sample", "50", "-c", "bench-pilot-mmlb",
                     "--count", str(args.count), "--questions-contextualizer", "llama", "--json"])
        seconds = time.perf_counter() - started
        if done.returncode:
            raise SystemExit(f"situate pilot failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        result = json.loads(done.stdout)
        row = {"part": "pilot on MMLongBench PDFs", "seconds": round(seconds, 1), **{
            k: result[k] for k in ("documents", "questions", "indexing_seconds")}, "generated": result["generated"]}
        print(json.dumps(row), flush=True)
        for subset, found in result["differences"].items():
            for d in found:
                print(f"  [{subset}] {d['metric']}: {d['before']:.2f} -> {d['after']:.2f}, {d['difference']:+.2f} "
                      f"({d['low']:+.2f} to {d['high']:+.2f}){' within the noise' if d['within_noise'] else ''}; "
                      f"{d['questions']} questions on {d['clusters']} documents")
        print(f"pilot on {result['documents']} PDFs, {result['questions']} generated questions: {seconds / 60:.1f} min "
              f"from the command to its table (target <= 10 min on 2 cores)")
    _cookbook(args)


def _cookbook(args: Any) -> None:
    """Plain and default on the cookbook, graded by its own labels and by generated questions."""
    plain, default = "bench-pilot-cookbook-plain", "bench-pilot-cookbook"
    corpus = DATA / "cookbook" / "codebase_chunks.json"
    worker = Worker(2, name="bench-pilot")
    try:
        for name, flags in ((plain, ["--contextualizer", "none"]), (default, [])):
            _run(["drop", "-c", name, "--yes"])
            done = _run(["ingest", "-c", name, *flags, "--format", "cookbook", str(corpus)])
            if done.returncode:
                raise SystemExit(done.stderr[-2000:])
    finally:
        worker.stop()
    started = time.perf_counter()
    done = _run(["labels", "generate", "-c", default, "--count", str(args.cookbook_count), "--contextualizer", "llama",
                 "--json"])
    if done.returncode:
        raise SystemExit(f"labels generate failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    generated = json.loads(done.stdout)
    with tempfile.TemporaryDirectory() as tmp:
        questions = Path(tmp) / "generated.jsonl"
        questions.write_text(_run(["labels", "export", "-c", default, "--source", "generated"]).stdout)
        orders = {}
        for label, path, fmt in (("cookbook's labels", DATA / "cookbook" / "evaluation_set.jsonl", "cookbook"),
                                 ("generated questions", questions, "jsonl")):
            out = _run(["eval", "-c", plain, "-c", default, "--queries", str(path), "--format", fmt,
                        "--configs", "dense,bm25,hybrid", "--json"])
            if out.returncode:
                raise SystemExit(out.stderr[-2000:])
            results = {r["config"]: r["pass@10"] for r in json.loads(out.stdout)["results"]}
            orders[label] = results
            differences = json.loads(out.stdout).get("differences", {}).get("all", [])
            print(json.dumps({"labels": label, "pass@10": results}), flush=True)
            for d in differences:
                if d["metric"] == "Pass@10":
                    print(f"  {label}: hybrid Pass@10 {d['before']:.2f} -> {d['after']:.2f} ({d['difference']:+.2f}, "
                          f"{d['low']:+.2f} to {d['high']:+.2f}){' within the noise' if d['within_noise'] else ''}")
    print(f"{generated['kept']} questions kept of {generated['asked']} asked ({generated['dropped_copied']} repeated "
          f"their chunk's words, {generated['dropped_not_a_question']} no question) in {time.perf_counter() - started:.0f} s")
    modes = ("dense", "bm25", "hybrid")
    agree = []
    for mode in modes:
        by = {label: (r[f"{plain}:{mode}"], r[f"{default}:{mode}"]) for label, r in orders.items()}
        same = all((b > a) == (list(by.values())[0][1] > list(by.values())[0][0]) for a, b in by.values())
        agree.append(same)
        print(f"{mode:7} plain -> default: " + "; ".join(f"{label} {a:.2f} -> {b:.2f}" for label, (a, b) in by.items())
              + f" — {'same order' if same else 'orders differ'}")
    print(f"generated questions rank plain chunks and the offline default as the cookbook's labels do: "
          f"{sum(agree)} of {len(agree)} search modes (target: hybrid)")
