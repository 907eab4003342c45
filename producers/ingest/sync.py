"""``situate ingest --sync``: a source's documents that no longer exist there leave the collection.

Each document ingested from a folder, a file or an S3 prefix has its source recorded in its
state (``source``: ``dir:/abs/path``, ``file:/abs/path``, ``s3://bucket/prefix``). A sync pass
reads the source as an ingest does; the documents recorded against it that the pass did not
see are deleted (``--dry-run``: listed). Files a walk skipped (too big, left out by a glob, a
link) still exist: they are never deleted. As a guard, a pass that would delete more than half
of a source's documents stops and asks for ``--force``: an unmounted disk or an emptied bucket
must not empty an index. Documents ingested before sources were recorded are tagged by the first
pass that sees them; one deleted at the source before that is out of a sync's sight.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from workers import lifecycle
from workers.storage import states

GUARD_SHARE = 0.5


def source_of(path: str) -> str:
    if path.startswith("s3://"):
        return path.rstrip("/")
    resolved = Path(path).resolve()
    return f"{'dir' if resolved.is_dir() else 'file'}:{resolved}"


@dataclass
class Plan:
    source: str
    tracked: int = 0  # documents recorded against the source
    gone: list[str] = field(default_factory=list)

    @property
    def refused(self) -> str | None:
        """Why this pass must not delete without --force, if it must not."""
        if self.gone and len(self.gone) > GUARD_SHARE * self.tracked:
            return (f"{self.source}: {len(self.gone)} of its {self.tracked} documents are gone from it; deleting "
                    f"more than {GUARD_SHARE:.0%} of a source takes --force (is it mounted, is the prefix right?)")
        return None


def plan(collection: str, source: str, present: set[str]) -> Plan:
    """The documents recorded against ``source`` that the pass did not see."""
    doc_ids = states.doc_ids(collection)
    out = Plan(source)
    for doc_id, (recorded,) in zip(doc_ids, states.fields_of(collection, doc_ids, "source")):
        if recorded == source:
            out.tracked += 1
            if doc_id not in present:
                out.gone.append(doc_id)
    out.gone.sort()
    return out


def record(collection: str, doc_id: str, source: str) -> None:
    states.annotate(collection, doc_id, source=source)


def delete(collection: str, doc_ids: list[str]) -> int:
    return sum(lifecycle.delete_document(collection, doc_id) for doc_id in doc_ids)
