"""Labelled questions a team keeps for its own collection: a question, the chunks that answer it,
who wrote it (a person on the search page, an import, or a model: ``source``), by whom and when.

``situate eval`` grades a search against them, so a team measures on its own documents. Each
answer is kept with its chunk's text beside its number: after a reindex cuts the document another
way the number means another chunk, and the evaluation finds the answer by its words instead (a
hit of the same document holding half of them: ``evaluation.evaluate.TEXT_MATCH``). A collection
keeps at most ``SITUATE_MAX_LABELS``; a label with the same question replaces the one before.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, cast

from workers import keys
from workers.connections import redis_client
from workers.errors import CollectionError
from workers.settings import get_settings
from workers.storage.scripts import script

SOURCES = ("person", "generated")


class TooManyLabels(CollectionError):
    http_status = 409


def label_id(query: str) -> str:
    """One label per question (normalised): marking more hits of it adds to it."""
    return hashlib.sha256(" ".join(query.lower().split()).encode()).hexdigest()[:16]


def put(collection: str, label: dict[str, Any]) -> dict[str, Any]:
    """Keep ``label`` (``query``, ``gold`` [{doc_id, chunk, text}], ``source``, ``by``, optional
    ``not_relevant``); its id and time are set here. Raises ``TooManyLabels`` past the bound."""
    stored = {**label, "id": label_id(label["query"]), "at": round(time.time(), 3)}
    limit = get_settings().max_labels
    if not script("labels_add")(keys=[keys.labels(collection)], args=[stored["id"], json.dumps(stored), limit]):
        raise TooManyLabels(f"collection {collection!r} keeps {limit:,} labels at most (SITUATE_MAX_LABELS): "
                            "delete some first")
    return stored


def get(collection: str, label: str) -> dict[str, Any] | None:
    raw = cast("str | None", redis_client().hget(keys.labels(collection), label))
    return json.loads(raw) if raw else None


def all_of(collection: str, source: str | None = None) -> list[dict[str, Any]]:
    """Every label of the collection (of one source), oldest first."""
    found = [json.loads(raw) for raw in cast("dict[str, str]", redis_client().hgetall(keys.labels(collection))).values()]
    return sorted((x for x in found if source is None or x.get("source") == source), key=lambda x: x.get("at", 0))


def delete(collection: str, label: str | None = None, source: str | None = None) -> int:
    """One label, every label of a source, or all of them; how many went."""
    r = redis_client()
    if label is not None:
        return int(r.hdel(keys.labels(collection), label))
    if source is None:
        n = int(r.hlen(keys.labels(collection)))
        r.delete(keys.labels(collection))
        return n
    doomed = [x["id"] for x in all_of(collection, source)]
    return int(r.hdel(keys.labels(collection), *doomed)) if doomed else 0


def forget_collection(collection: str) -> None:
    redis_client().delete(keys.labels(collection))


def exported(label: dict[str, Any]) -> dict[str, Any]:
    """A label in ``situate eval``'s format: ``{"query", "gold": [{"doc_id", "text"}], "source"}``.
    The answer is given by its text (the half-the-words rule), so it survives a reindex; the chunk
    number it had goes along as ``chunk_at_label`` for a reader."""
    gold = [{"doc_id": g["doc_id"], "text": g["text"], "chunk_at_label": g.get("chunk")} if g.get("text")
            else {"doc_id": g["doc_id"], "chunk": g["chunk"]} for g in label["gold"]]
    out = {"query": label["query"], "gold": gold, "source": label.get("source", "person")}
    for key in ("by", "at", "id"):
        if label.get(key) is not None:
            out[key] = label[key]
    return out
