"""Helpers the integration tests share: the CLI as a subprocess, in-process ingest, the corpora."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from harness import ROOT, SITUATE

SHARED = ROOT.parent / "shared"
COOKBOOK = SHARED / "data" / "cookbook"
SECRET_KEY = "sk-ant-test-SECRET-0123456789"
TEST_MODEL = "claude-haiku-5-5"  # 2,048-token cache minimum in the table


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``situate ARGS`` in a subprocess: for tests whose point is the command line itself."""
    # Wide: Rich wraps and cuts error boxes to the terminal's width.
    return subprocess.run([SITUATE, *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250", **(env or {})}, timeout=timeout)


def cookbook_docs() -> list[dict]:
    return json.loads((COOKBOOK / "codebase_chunks.json").read_text())


def ingest(collection: str, docs: list[dict[str, Any]], timeout: float = 300, **settings: Any) -> dict[str, dict]:
    """Documents ``{"id", "text", "metadata"?, "chunks"?}`` through the same submit and wait as
    ``situate ingest``, in this process; returns the final state per doc_id, searchable."""
    from producers.submit import RawDocument, submit, wait
    from workers import lifecycle
    from workers.storage import chunk_index

    config = lifecycle.ensure(collection, **settings)
    raws = []
    for d in docs:
        chunks = d.get("chunks")
        if chunks is not None:
            chunks = [c if isinstance(c, dict) else {"n": i, "text": c} for i, c in enumerate(chunks)]
        raws.append(RawDocument(d["id"], d["text"], d.get("metadata") or {}, chunks))
    final = wait(config, submit(config, raws), timeout=timeout)
    chunk_index.refresh(config)
    return final


def write_jsonl(path: Path, docs: list[dict]) -> str:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return str(path)
