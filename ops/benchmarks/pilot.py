"""``ops/bench pilot``: ``situate pilot`` as a user runs it, offline, on public documents.

1. **A folder of PDFs to a before/after table with intervals**: ``situate pilot`` on MMLongBench's
   public PDFs (``--sample 50``: all 22), the packaged Qwen2.5-Coder-0.5B writing the questions
   through ``llama`` on this machine's CPU; the time from the command to its table (target: at most
   10 minutes on 2 cores).
2. **Do generated questions rank configurations as people's labels do?** On each public corpus
   (the cookbook, FinanceBench, MMLongBench), plain chunks and the offline default, evaluated with
   the corpus's own labels and with questions the same model generated, once with each of ``labels
   generate``'s prompts (the document's opening before the chunk, and the chunk alone): every order
   printed, and on how many corpora each prompt's hybrid order agrees with the labels'. A tie is not
   an agreement.

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

from ops.benchmarks import corpora
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
    _agreement(args)


PROMPTS = {"opening": [], "chunk alone": ["--no-opening"]}  # labels generate's two prompts
MODES = ("dense", "bm25", "hybrid")


def _agreement(args: Any) -> None:
    """Plain chunks and the offline default on each public corpus, graded by its own labels and by
    questions generated with each prompt: does each prompt's order match the labels'?"""
    agree: dict[str, list[str]] = {prompt: [] for prompt in PROMPTS}
    for corpus in args.agreement.split(","):
        plain, default = f"bench-pilot-{corpus}-plain", f"bench-pilot-{corpus}"
        worker = Worker(2, name="bench-pilot")
        try:
            for name, flags in ((plain, ["--contextualizer", "none"]), (default, [])):
                _run(["drop", "-c", name, "--yes"])
                corpora.ingest(name, corpus, flags)
        finally:
            worker.stop()
        orders = {"labels": _order(corpus, "labels", plain, default, *corpora.labels(corpus))}
        for prompt, flags in PROMPTS.items():
            _run(["labels", "delete", "-c", default, "--source", "generated", "--yes"])
            started = time.perf_counter()
            done = _run(["labels", "generate", "-c", default, "--count", str(args.agreement_count), "--contextualizer",
                         "llama", *flags, "--json"])
            if done.returncode:
                raise SystemExit(f"labels generate failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
            generated = json.loads(done.stdout)
            print(f"{corpus}, {prompt}: {generated['kept']} questions kept of {generated['asked']} asked "
                  f"({generated['dropped_copied']} repeated their chunk's words, {generated['dropped_not_a_question']} "
                  f"no question) in {time.perf_counter() - started:.0f} s; e.g. "
                  + " | ".join(e["question"] for e in generated["examples"][:3]), flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "generated.jsonl"
                path.write_text(_run(["labels", "export", "-c", default, "--source", "generated"]).stdout)
                orders[prompt] = _order(corpus, prompt, plain, default, path, "jsonl")
        for prompt in PROMPTS:
            same = [mode for mode in MODES if _sign(orders[prompt][mode]) == _sign(orders["labels"][mode])]
            print(f"{corpus}, {prompt}: " + "; ".join(
                f"{mode} labels {orders['labels'][mode][0]:.2f} -> {orders['labels'][mode][1]:.2f}, generated "
                f"{orders[prompt][mode][0]:.2f} -> {orders[prompt][mode][1]:.2f}" for mode in MODES)
                + f" — same order in {', '.join(same) or 'no mode'}", flush=True)
            if "hybrid" in same:
                agree[prompt].append(corpus)
    for prompt, corpora_agreeing in agree.items():
        print(f"questions generated with {prompt}: plain -> default (hybrid) in the labels' order on "
              f"{len(corpora_agreeing)} of {len(args.agreement.split(','))} corpora ({', '.join(corpora_agreeing) or 'none'}; "
              f"target: at least 2 of 3)")


def _order(corpus: str, graded_by: str, plain: str, default: str, queries: Path, fmt: str) -> dict[str, tuple[float, float]]:
    """Plain's and the default's headline figure (page@10 for page labels, else Pass@10) by search mode."""
    out = _run(["eval", "-c", plain, "-c", default, "--queries", str(queries), "--format", fmt,
                "--configs", ",".join(MODES), "--json"])
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    payload = json.loads(out.stdout)
    figure = {r["config"]: r.get("page@10", r["pass@10"]) for r in payload["results"]}
    print(json.dumps({"corpus": corpus, "graded by": graded_by, "questions": payload["results"][0]["queries"],
                      "headline@10": figure}), flush=True)
    for d in payload.get("differences", {}).get("all", []):
        if d["metric"] in ("Pass@10", "page@10"):
            noise = " within the noise" if d["within_noise"] else ""
            print(f"  {corpus}, {graded_by}: hybrid {d['metric']} {d['before']:.2f} -> {d['after']:.2f} "
                  f"({d['difference']:+.2f}, {d['low']:+.2f} to {d['high']:+.2f}){noise}"
                  f" on {d['questions']} questions, {d['clusters']} documents", flush=True)
    return {mode: (figure[f"{plain}:{mode}"], figure[f"{default}:{mode}"]) for mode in MODES}


def _sign(pair: tuple[float, float]) -> int:
    return (pair[1] > pair[0]) - (pair[1] < pair[0])
