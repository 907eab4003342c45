"""Turn what a user points at into RawDocuments: files, folders, JSONL, the cookbook JSON.

Loaders never validate content (``submit`` does, for every source alike); a loader reports
what it could not even read — a malformed JSONL line, an unreadable file — as a document
carrying its error, so it fails alone and visibly like any other bad document.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from producers.submit import RawDocument

FORMATS = ("auto", "files", "jsonl", "cookbook")
# Skipped when walking a folder (a file named explicitly is always tried, and fails visibly).
BINARY_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".ico", ".pdf", ".zip", ".gz", ".tgz",
                   ".bz2", ".xz", ".7z", ".tar", ".jar", ".class", ".so", ".dylib", ".dll", ".exe",
                   ".o", ".a", ".pyc", ".whl", ".mp3", ".mp4", ".mov", ".woff", ".woff2", ".ttf"}


def load(paths: list[str], fmt: str = "auto") -> Iterator[RawDocument]:
    for p in paths:
        path = Path(p)
        kind = fmt
        if kind == "auto":
            kind = "jsonl" if path.suffix == ".jsonl" else "files"
        if kind == "jsonl":
            yield from load_jsonl(path)
        elif kind == "cookbook":
            yield from load_cookbook(path)
        elif path.is_dir():
            yield from load_folder(path)
        else:
            yield load_file(path, path.name if not path.is_absolute() else str(path))


def load_file(path: Path, doc_id: str) -> RawDocument:
    metadata = {"path": doc_id}
    try:
        return RawDocument(doc_id, path.read_bytes(), metadata)
    except OSError as e:
        return RawDocument(doc_id, None, metadata, error=f"cannot read {path}: {e.strerror or e}")


def load_folder(root: Path) -> Iterator[RawDocument]:
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        if path.suffix.lower() in BINARY_SUFFIXES:
            continue
        yield load_file(path, rel.as_posix())


def load_jsonl(path: Path) -> Iterator[RawDocument]:
    """``{"id", "text", "metadata"?, "chunks"?}`` per line; ``chunks`` = pre-made chunks, either
    strings or ``{"n", "text"}``."""
    with path.open("rb") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            fallback_id = f"{path.name}:{lineno}"
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                yield RawDocument(fallback_id, None, error=f"{path.name} line {lineno}: invalid JSON ({e})")
                continue
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                yield RawDocument(str(record.get("id", fallback_id)) if isinstance(record, dict) else fallback_id,
                                  None, error=f"{path.name} line {lineno}: needs a string field 'text'")
                continue
            chunks = record.get("chunks")
            if isinstance(chunks, list):
                chunks = [c if isinstance(c, dict) else {"n": i, "text": c} for i, c in enumerate(chunks)]
            yield RawDocument(str(record.get("id") or fallback_id), record["text"],
                              record.get("metadata") or {}, chunks)


def load_cookbook(path: Path) -> Iterator[RawDocument]:
    """Anthropic's cookbook corpus, chunks kept as labelled: doc_id = ``original_uuid``,
    chunk number = ``original_index``."""
    for doc in json.loads(path.read_text(encoding="utf-8")):
        chunks = [{"n": c["original_index"], "text": c["content"]} for c in doc["chunks"]]
        yield RawDocument(doc["original_uuid"], doc["content"], {"cookbook_id": doc["doc_id"]}, chunks)
