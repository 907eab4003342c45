"""Turn what a user points at into RawDocuments: files, folders, JSONL, the cookbook JSON.

Loaders never validate content (``submit`` does, for every source alike); a loader reports
what it could not even read — a malformed JSONL line, an unreadable file, one over the size
limit (checked before it is read) — as a document carrying its error, so it fails alone and
visibly like any other bad document. What a folder walk leaves out is counted and listed
(``Skipped``), never dropped without a word.

A folder walk stays inside its folder: symbolic links are skipped unless ``follow_symlinks``,
and even then one that leads out of the folder is skipped (``notes.md -> ~/.aws/credentials``
is not read). Hidden files and folders (``.git``) are skipped.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from workers.documents.validation import RawDocument
from workers.settings import get_settings

FORMATS = ("auto", "files", "jsonl", "cookbook")
# Files are read as text, code, or — told by their content — PDF, Office, HTML, CSV, extracted by
# the workers (``workers.extraction``). Skipped when walking a folder, and listed as skipped
# (a file named explicitly is always tried, and fails visibly):
BINARY_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".ico", ".zip", ".gz", ".tgz",
                   ".bz2", ".xz", ".7z", ".tar", ".jar", ".class", ".so", ".dylib", ".dll", ".exe",
                   ".o", ".a", ".pyc", ".whl", ".mp3", ".mp4", ".mov", ".woff", ".woff2", ".ttf"}


@dataclass
class Skipped:
    """What a folder walk left out, by reason (``reason -> paths``), for the ingest summary."""

    by_reason: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, path: str) -> None:
        self.by_reason.setdefault(reason, []).append(path)

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.by_reason.values())


@dataclass
class Selection:
    """Which files of a folder to take: ``include`` / ``exclude`` globs on the path relative to
    the folder (``*.pdf``, ``reports/**``); links followed or not."""

    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    follow_symlinks: bool = False

    def wants(self, rel: str) -> bool:
        return (not self.include or _matches(rel, self.include)) and not _matches(rel, self.exclude)


def _matches(rel: str, patterns: list[str]) -> bool:
    """A glob matches the relative path (``reports/*.pdf``) or the file name alone (``*.pdf``)."""
    name = rel.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns)


def load(paths: list[str], fmt: str = "auto", selection: Selection | None = None,
         skipped: Skipped | None = None) -> Iterator[RawDocument]:
    selection = selection or Selection()
    skipped = skipped if skipped is not None else Skipped()
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
            yield from load_folder(path, selection, skipped)
        else:
            yield load_file(path, path.name if not path.is_absolute() else str(path))


def too_big(size: int) -> str | None:
    limit = get_settings().max_document_bytes
    if size > limit:
        return f"file is {size:,} bytes, over the limit of {limit:,} (SITUATE_MAX_DOCUMENT_BYTES); not read"
    return None


def load_file(path: Path, doc_id: str) -> RawDocument:
    metadata = {"path": doc_id}
    try:
        error = too_big(path.stat().st_size)
        if error:
            return RawDocument(doc_id, None, metadata, error=error)
        return RawDocument(doc_id, path.read_bytes(), metadata, name=path.name)
    except OSError as e:
        return RawDocument(doc_id, None, metadata, error=f"cannot read {doc_id}: {e.strerror or e}")


def load_folder(root: Path, selection: Selection | None = None, skipped: Skipped | None = None) -> Iterator[RawDocument]:
    """The folder's files, in path order; the document id is the path relative to the folder."""
    selection = selection or Selection()
    skipped = skipped if skipped is not None else Skipped()
    for rel, path in _walk(root, selection.follow_symlinks, skipped):
        if path.suffix.lower() in BINARY_SUFFIXES:
            skipped.add("not a document (archive, image, binary)", rel)
        elif not selection.wants(rel):
            skipped.add("left out by --include/--exclude", rel)
        else:
            yield load_file(path, rel)


def _walk(root: Path, follow: bool, skipped: Skipped) -> Iterator[tuple[str, Path]]:
    real_root = root.resolve()
    found: list[tuple[str, Path]] = []
    seen_dirs = {real_root}
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            skipped.add(f"cannot list: {e.strerror or e}", str(folder))
            continue
        for entry in entries:
            rel = Path(entry.path).relative_to(root).as_posix()
            if entry.name.startswith("."):
                continue  # hidden: .git, .DS_Store, editors' files
            if entry.is_symlink():
                if not follow:
                    skipped.add("symbolic link (--follow-symlinks to follow it)", rel)
                    continue
                target = Path(entry.path).resolve()
                if not target.is_relative_to(real_root):
                    skipped.add("symbolic link out of the folder", rel)
                    continue
                if target.is_dir():
                    if target not in seen_dirs:
                        seen_dirs.add(target)
                        stack.append(Path(entry.path))
                    continue
            elif entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
                continue
            if Path(entry.path).is_file():
                found.append((rel, Path(entry.path)))
    yield from sorted(found)


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
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
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
