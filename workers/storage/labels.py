"""Labelled questions a team keeps for its own collection: a question, the chunks that answer it,
who wrote it (a person on the search page, an import, or a model: ``source``), by whom and when.

``situate eval`` grades a search against them, so a team measures on its own documents. Each
answer is kept with its chunk's text beside its number: after a reindex cuts the document another
way the number means another chunk, and the evaluation finds the answer by its words instead (a
hit of the same document holding half of them: ``evaluation.evaluate.TEXT_MATCH``). A collection
keeps at most ``SITUATE_MAX_LABELS``. One question is one label: a mark on it is merged into
it in one script (``labels_put.lua``), so marks posted at once all survive; a person's label is
never merged with a generated twin nor replaced by an import (the twin is dropped, and counted).
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
MAX_GOLD = 50           # answers one label holds
MAX_NOT_RELEVANT = 200  # hits marked not relevant one label holds
OUTCOMES = ("new", "merged", "replaced", "kept")


class TooManyLabels(CollectionError):
    http_status = 409


def label_id(query: str) -> str:
    """One label per question (normalised): marking more hits of it adds to it."""
    return hashlib.sha256(" ".join(query.lower().split()).encode()).hexdigest()[:16]


def put(collection: str, label: dict[str, Any], merge: bool = True) -> tuple[str, dict[str, Any]]:
    """Keep ``label`` (``query``, ``gold`` [{doc_id, chunk, text}], ``not_relevant``, ``source``,
    ``by``); its id and time are set here. ``merge``: its marks join the question's (the search
    page); else it replaces a generated label of the question (an import's line). Returns the
    outcome (``OUTCOMES``) and the label as kept. Raises ``TooManyLabels`` past the collection's
    bound, ``CollectionError`` past a label's."""
    stored = {**label, "id": label_id(label["query"]), "at": round(time.time(), 3)}
    limit = get_settings().max_labels
    outcome, kept = script("labels_put")(keys=[keys.labels(collection)], args=[
        stored["id"], json.dumps(stored), limit, "merge" if merge else "replace", MAX_GOLD, MAX_NOT_RELEVANT])
    if outcome == "full":
        raise TooManyLabels(f"collection {collection!r} keeps {limit:,} labels at most (SITUATE_MAX_LABELS): "
                            "delete some first")
    if outcome == "too_many":
        raise CollectionError(f"a question keeps {MAX_GOLD} answers and {MAX_NOT_RELEVANT} hits marked not relevant "
                              "at most")
    return outcome, _as_read(kept)


def _as_read(raw: str) -> dict[str, Any]:
    """A stored label; its lists as lists (Redis's Lua JSON writes an empty list as ``{}``)."""
    label: dict[str, Any] = json.loads(raw)
    for name in ("gold", "not_relevant"):
        if not isinstance(label.get(name), list):
            label[name] = []
    return label


def get(collection: str, label: str) -> dict[str, Any] | None:
    raw = cast("str | None", redis_client().hget(keys.labels(collection), label))
    return _as_read(raw) if raw else None


def count(collection: str) -> int:
    return int(redis_client().hlen(keys.labels(collection)))


def all_of(collection: str, source: str | None = None) -> list[dict[str, Any]]:
    """Every label of the collection (of one source), oldest first."""
    found = [_as_read(raw) for raw in cast("dict[str, str]", redis_client().hgetall(keys.labels(collection))).values()]
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
    """A label in ``situate eval``'s format: ``{"query", "gold": [{"doc_id", "text"}], "not_relevant",
    "source"}``. An answer is given by its text (the half-the-words rule), so it survives a
    reindex; the chunk number it had goes along as ``chunk_at_label`` for a reader."""
    def marks(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"doc_id": g["doc_id"], "text": g["text"], "chunk_at_label": g.get("chunk")} if g.get("text")
                else {"doc_id": g["doc_id"], "chunk": g["chunk"]} if g.get("chunk") is not None
                else {"doc_id": g["doc_id"], "page": g.get("page")} for g in found]

    out = {"query": label["query"], "gold": marks(label.get("gold") or []),
           "not_relevant": marks(label.get("not_relevant") or []), "source": label.get("source", "person")}
    for key in ("by", "at", "id"):
        if label.get(key) is not None:
            out[key] = label[key]
    return out
