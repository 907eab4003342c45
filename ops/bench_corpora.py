"""``ops/bench corpora``: the offline defaults against plain chunks, on every public corpus.

Each labelled corpus in ``../shared/data`` (the cookbook's code, English technical prose,
French) is ingested twice with the settings a new user gets — plain chunks (``--contextualizer
none``) and the defaults (no flag but ``--language`` where the text is not English) — then
evaluated in one report: a table per corpus and a summary (``situate eval --suites``). This is
the check every retrieval change must pass on all three corpora, not on one.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import yaml

from bench_common import DATA
from harness import ROOT, SITUATE, Worker

CORPORA = {  # name -> language a user would declare
    "cookbook": "english",
    "tech_faq_en": "english",
    "debian_faq_fr": "french",
}


def ingest(collection: str, corpus: str, flags: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([SITUATE, "ingest", "-c", collection, "--format", "cookbook", *flags,
                    str(DATA / corpus / "codebase_chunks.json")], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def bench_corpora(args) -> None:
    report = Path(args.report)
    report.mkdir(parents=True, exist_ok=True)
    suites, timings = {}, {}
    worker = Worker(2, name="bench-corpora")
    try:
        for corpus, language in CORPORA.items():
            if not (DATA / corpus / "codebase_chunks.json").exists():
                sys.exit(f"corpus {corpus} not found in {DATA}")
            language_flag = [] if language == "english" else ["--language", language]
            plain, default = f"{args.prefix}{corpus}-plain".replace("_", "-"), f"{args.prefix}{corpus}".replace("_", "-")
            for name in (plain, default):  # what a new user gets: fresh collections
                subprocess.run([SITUATE, "drop", "-c", name, "--yes"], capture_output=True)
            timings[plain] = ingest(plain, corpus, ["--contextualizer", "none", *language_flag])
            timings[default] = ingest(default, corpus, language_flag)
            suites[corpus] = {"queries": str(DATA / corpus / "evaluation_set.jsonl"), "format": "cookbook",
                              "collections": {"plain": plain, "default": default}}
    finally:
        worker.stop()
    path = report / "suites.yaml"
    path.write_text(yaml.safe_dump(suites, sort_keys=False))
    for name, seconds in timings.items():
        print(f"ingested {name} in {seconds:.0f} s", flush=True)
    subprocess.run([SITUATE, "eval", "--suites", str(path), "--report", str(report)], check=True, cwd=ROOT)
    print(f"report: {report / 'report.md'}")
