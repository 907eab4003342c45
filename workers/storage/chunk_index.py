"""The OpenSearch index of a collection: created, owned, written, read back.

One index per collection, ``situate-<name>`` (a reindex builds ``situate-<name>.g<n>``: see
``catalog``). Its ``_meta`` says which collection owns it (name and id): an index is created,
changed or deleted only by its owner, whatever its name; one with no ``_meta`` of ours is a
stray (OpenSearch creates an index on a write to a missing one) and is replaced. Each chunk is one OpenSearch document with a
deterministic ``_id`` (collection, doc_id, version, chunk number), so a redelivered task
overwrites instead of duplicating, and two versions of a document never overwrite each other;
``seq`` (the submission's number) says which is newer. The raw chunk (``text``) and its context (``context``) are
separate BM25 fields, weighted at query time (see ``producers.retrieval``), so a weak context adds terms
without drowning the chunk; ``vector`` is the embedding, HNSW in Lucene (pure Java: the
Maven build of k-NN has no native faiss/nmslib libraries).

Its settings, analyzers and fields are ``index_mapping``'s.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from opensearchpy import TransportError, helpers

from workers import metrics
from workers.connections import opensearch_client
from workers.documents.identity import chunk_id
from workers.errors import Conflict, WriteNotNow, WriteRefused
from workers.storage.catalog import CollectionConfig
from workers.storage.index_mapping import CITATION_FIELDS, mapping, replicas, stored_vector

log = logging.getLogger("situate.index")

SCAN_PAGE = 1000  # hits a page when a search reads every chunk it matches


def ensure_index(config: CollectionConfig) -> None:
    """See ``_ensure_index``; an index blocked for writes (a full disk) is "not now"."""
    try:
        _ensure_index(config)
    except TransportError as e:
        if is_transient(e.status_code, e.error):
            metrics.count("index_write_blocked", collection=config.name)
            raise WriteNotNow(f"OpenSearch cannot change index {config.index_name} now: {e.error} "
                              f"({str(e.info)[:200]})") from None
        raise


def _mappings(index: str) -> dict[str, Any]:
    found: dict[str, Any] = opensearch_client().indices.get_mapping(index=index)
    for entry in found.values():  # one index asked: one entry, under its real name
        mappings: dict[str, Any] = entry.get("mappings", {})
        return mappings
    return {}


def owner_of(index: str, mappings: dict[str, Any] | None = None) -> dict[str, str | None] | None:
    """The owner an index's ``_meta`` names; None for an index that is not situate's. An index
    made before owners were recorded is its configuration's (a generation being built then names
    its collection only: ``id`` None)."""
    meta = (_mappings(index) if mappings is None else mappings).get("_meta") or {}
    if "owner" in meta:
        return {"collection": meta["owner"].get("collection"), "id": meta["owner"].get("id")}
    situate = meta.get("situate")
    if not isinstance(situate, dict):
        return None
    building = situate.get("rebuilds") or ""
    return {"collection": building or str(situate.get("name", "")).split("~", 1)[0],
            "id": None if building else situate.get("generation")}


def owns(config: CollectionConfig, found: dict[str, str | None] | None) -> bool:
    return found is not None and found.get("collection") == config.base_name and found.get("id") in (None, config.owner_id)


def _taken(index: str, by: dict[str, str | None]) -> Conflict:
    owner = by.get("collection")
    return Conflict(f"index {index} belongs to collection {owner!r} (a generation of it, built "
                    "before 0.3 named its indexes so): choose another name for this collection"
                    + (f", or if no collection {owner!r} is listed any more (Redis lost its data), "
                       f"`situate drop -c {owner}` deletes the index it left behind" if owner else ""))


def check_free(config: CollectionConfig) -> None:
    """Before a collection is created: its index's name is free, a stray's, or its own."""
    client = opensearch_client()
    if client.indices.exists(index=config.index_name):
        found = owner_of(config.index_name)
        if found is not None and not owns(config, found):
            raise _taken(config.index_name, found)


def _ensure_index(config: CollectionConfig) -> None:
    """Create the collection's index unless it is there. Callers that loaded ``config`` a while
    ago (a task) first check that it is still the collection's generation (``catalog.is_current``),
    so a dropped collection's index is never brought back with its old mapping. One that a stray
    write created meanwhile (OpenSearch creates an index on a write, with a mapping guessed from
    the data) has no ``_meta`` of ours: it is replaced. One another collection owns is left alone
    (``Conflict``)."""
    client = opensearch_client()
    if client.indices.exists(index=config.index_name):
        if (config.index_name, config.generation) in _checked:
            return
        mappings = _mappings(config.index_name)
        found = owner_of(config.index_name, mappings)
        if found is not None:
            if not owns(config, found):
                raise _taken(config.index_name, found)
            properties = mappings.get("properties", {})
            missing = {k: v for k, v in CITATION_FIELDS.items() if k not in properties}
            if missing:  # ours: bring it up to today's mapping (fields only ever added)
                client.indices.put_mapping(index=config.index_name, body={"properties": missing})
            _checked.add((config.index_name, config.generation))
            return
        client.indices.delete(index=config.index_name, ignore_unavailable=True)
    try:
        client.indices.create(index=config.index_name, body=mapping(config))
    except Exception as e:  # created meanwhile by another process: fine
        if "resource_already_exists_exception" not in str(e):
            raise


# (index, generation) pairs this process has seen to be ours: one mapping read each, not one per write.
_checked: set[tuple[str, str]] = set()


def set_replicas(config: CollectionConfig) -> None:
    """The index's replicas as ``config`` says, in place (a dynamic setting)."""
    opensearch_client().indices.put_settings(index=config.index_name,
                                             body={"index": replicas(config.index_replicas)})


def delete_stray_index(config: CollectionConfig) -> None:
    """Delete the index if it is not situate's at all: one a late write created after its
    collection's drop."""
    client = opensearch_client()
    if client.indices.exists(index=config.index_name) and owner_of(config.index_name) is None:
        client.indices.delete(index=config.index_name, ignore_unavailable=True)


def delete_index(config: CollectionConfig) -> None:
    """The collection's index, if it is its own (or no one's): never another collection's."""
    client = opensearch_client()
    if not client.indices.exists(index=config.index_name):
        return
    found = owner_of(config.index_name)
    if found is not None and not owns(config, found):
        log.warning("index %s belongs to collection %s, not %s: left alone", config.index_name,
                    found.get("collection"), config.base_name)
        return
    client.indices.delete(index=config.index_name, ignore_unavailable=True)


def _source(config: CollectionConfig, doc_id: str, version: str, seq: int, row: dict[str, Any],
            metadata: dict[str, Any]) -> dict[str, Any]:
    source = {"doc_id": doc_id, "chunk": row["n"], "version": version, "seq": seq, "text": row["text"],
              "context": row["context"], "start": row.get("start"), "end": row.get("end"), "metadata": metadata,
              "vector": stored_vector(config, row["vector"])}
    for field in CITATION_FIELDS:
        if row.get(field):
            source[field] = row[field]
    return source


@dataclass(frozen=True)
class VersionWrite:
    """One version of one document to write whole (``write_versions``)."""

    doc_id: str
    version: str
    seq: int
    rows: list[dict[str, Any]]
    metadata: dict[str, Any]
    rollback: bool = True


def write_version(config: CollectionConfig, doc_id: str, version: str, seq: int, rows: list[dict[str, Any]],
                  metadata: dict[str, Any], rollback: bool = True) -> None:
    """Bulk-index one version of a document. Its chunk ids carry the version, so it never
    overwrites another version; ``seq`` orders versions (newer wins, see ``delete_older`` and
    the read path). If OpenSearch refuses any chunk, the ones written are deleted again
    (``rollback``: not when they overwrote this same version, already indexed) and
    ``WriteNotNow`` or ``WriteRefused`` is raised: a version is in the index whole, or not at all."""
    refused = write_versions(config, [VersionWrite(doc_id, version, seq, rows, metadata, rollback)])
    if refused:
        raise refused[doc_id]


def write_versions(config: CollectionConfig, writes: list[VersionWrite]) -> dict[str, WriteRefused]:
    """``write_version`` for several documents in one bulk request: each is in the index whole or
    not at all, on its own. What OpenSearch refused, by document (its chunks written rolled back):
    the others are written."""
    client = opensearch_client()
    owner: dict[str, VersionWrite] = {}
    ids: dict[str, list[str]] = {}  # each document's chunk ids, in order
    actions = []
    for w in writes:
        for row in w.rows:
            i = chunk_id(config.name, w.doc_id, w.version, row["n"])
            owner[i] = w
            ids.setdefault(w.doc_id, []).append(i)
            actions.append({"_op_type": "index", "_index": config.index_name, "_id": i,
                            "_source": _source(config, w.doc_id, w.version, w.seq, row, w.metadata)})
    _, errors = helpers.bulk(client, actions, chunk_size=200, raise_on_error=False, raise_on_exception=False,
                             max_retries=3)
    if not errors:
        return {}
    by_document: dict[str, list[dict[str, Any]]] = {}
    for e in errors:
        item = e.get("index", e)
        sent = owner.get(item.get("_id") or "")  # an id we sent, or none (the whole request failed)
        for hit in ([sent] if sent is not None else writes):
            by_document.setdefault(hit.doc_id, []).append(item)
    if any(_blocked(item.get("error")) for items in by_document.values() for item in items):
        metrics.count("index_write_blocked", collection=config.name)
    refused: dict[str, WriteRefused] = {}  # WriteNotNow where another try may do
    undo: list[str] = []
    for w in writes:
        items = by_document.get(w.doc_id)
        if not items:
            continue
        if w.rollback:
            failed = {item.get("_id") for item in items}
            undo += [i for i in ids.get(w.doc_id, []) if i not in failed]
        transient = any(is_transient(item.get("status"), item.get("error")) for item in items)
        message = f"OpenSearch refused {len(items)} of {len(w.rows)} chunk(s): {items[0].get('error')}"
        refused[w.doc_id] = WriteNotNow(message) if transient else WriteRefused(message)
    if undo:
        helpers.bulk(client, ({"_op_type": "delete", "_index": config.index_name, "_id": i} for i in undo),
                     raise_on_error=False, raise_on_exception=False)
    return refused


def _blocked(error: Any) -> bool:
    """A ``cluster_block_exception``: the index is read-only for now — the flood-stage disk
    watermark passed (429), or an operator's write block (403)."""
    kind = error.get("type") if isinstance(error, dict) else error
    return kind == "cluster_block_exception" or "cluster_block_exception" in str(error)


def is_transient(status: Any, error: Any = None) -> bool:
    """Worth another try later: overloaded (429), failing (5xx), blocked for writes (a full
    disk: ``_blocked``), or never answered. A request cut off mid-way (a node going down) has no
    HTTP status at all: opensearch-py reports it as "N/A" (a string), or not at all."""
    return not isinstance(status, int) or status in (0, 429) or status >= 500 or _blocked(error)


def _raise_if_not_done(config: CollectionConfig, errors: list[dict[str, Any]]) -> None:
    """Deletes that did not happen for a passing reason (blocked, overloaded) are tried again:
    a chunk left behind would be a stale one. Gone already (404) or overwritten since (409, see
    ``_delete_seen``) is done."""
    pending = [e.get("delete", e) for e in errors]
    pending = [e for e in pending if e.get("status") not in (404, 409)]
    if not pending:
        return
    if any(_blocked(e.get("error")) for e in pending):
        metrics.count("index_write_blocked", collection=config.name)
    message = f"OpenSearch did not delete {len(pending)} chunk(s): {pending[0].get('error')}"
    if any(is_transient(e.get("status"), e.get("error")) for e in pending):
        raise WriteNotNow(message)
    raise WriteRefused(message)


def _scan(config: CollectionConfig, query: dict[str, Any]) -> list[tuple[str, int, int]]:
    """The hits' ids, each with the sequence number and primary term of the copy the search saw.

    One plain search first: a document's older chunks almost always fit in one page, and a
    scroll costs two requests more (open, clear) and a search context kept on the node, on every
    document indexed. Only a full page means more may follow, and then the scroll reads them all."""
    client = opensearch_client()
    page = client.search(index=config.index_name, body={"query": query}, _source=False, size=SCAN_PAGE,
                         seq_no_primary_term=True, track_total_hits=False)["hits"]["hits"]
    if len(page) >= SCAN_PAGE:
        page = list(helpers.scan(client, index=config.index_name, query={"query": query},
                                 _source=False, size=SCAN_PAGE, seq_no_primary_term=True))
    return [(h["_id"], h["_seq_no"], h["_primary_term"]) for h in page]


def _delete_seen(config: CollectionConfig, seen: list[tuple[str, int, int]]) -> int:
    """Delete what a search saw, and only that: a search reads an index as of its last refresh,
    and a chunk id is the same for the same content, so the copy seen may have been overwritten
    since by a newer submission of that content. ``if_seq_no`` makes such a delete a conflict,
    which is left alone, instead of deleting the new copy."""
    if seen:
        _, errors = helpers.bulk(opensearch_client(), ({"_op_type": "delete", "_index": config.index_name, "_id": i,
                                                        "if_seq_no": seq_no, "if_primary_term": term}
                                                       for i, seq_no, term in seen),
                                 raise_on_error=False)
        _raise_if_not_done(config, errors)
    return len(seen)


def _delete_ids(config: CollectionConfig, ids: list[str]) -> int:
    ids = list(ids)
    if ids:
        _, errors = helpers.bulk(opensearch_client(), ({"_op_type": "delete", "_index": config.index_name, "_id": i}
                                                       for i in ids), raise_on_error=False)
        _raise_if_not_done(config, errors)
    return len(ids)


def delete_older(config: CollectionConfig, doc_id: str, seq: int, refresh_first: bool = False) -> int:
    """Remove a document's chunks from submissions before ``seq``, once ``seq`` is written.

    Search-then-delete rather than ``_delete_by_query`` (that lives in the reindex module,
    which our Maven-assembled node does not carry). A search sees what was written before the
    last refresh (1 s): ``refresh_first`` when an older version may have been written since."""
    return delete_older_many(config, {doc_id: seq}, refresh_first)


def delete_older_many(config: CollectionConfig, seqs: dict[str, int], refresh_first: bool = False) -> int:
    """``delete_older`` for several documents (doc id -> the ``seq`` written), in one search."""
    if not seqs:
        return 0
    if refresh_first:
        refresh(config)
    each = [{"bool": {"filter": [{"term": {"doc_id": d}}, {"range": {"seq": {"lt": seq}}}]}} for d, seq in seqs.items()]
    query = each[0] if len(each) == 1 else {"bool": {"should": each, "minimum_should_match": 1}}
    return _delete_seen(config, _scan(config, query))


def delete_version(config: CollectionConfig, doc_id: str, version: str, numbers: list[int]) -> int:
    """Remove chunks just written for a version that lost its race (superseded or deleted)."""
    return _delete_ids(config, [chunk_id(config.name, doc_id, version, n) for n in numbers])


def delete_document(config: CollectionConfig, doc_id: str, up_to_seq: int | None = None) -> int:
    """Remove a document's chunks: all of them, or those of submission ``up_to_seq`` and older
    (what a delete saw; a newer submission's chunks are not its to remove)."""
    refresh(config)
    query: dict[str, Any] = {"term": {"doc_id": doc_id}}
    if up_to_seq is not None:
        query = {"bool": {"filter": [query, {"range": {"seq": {"lte": up_to_seq}}}]}}
    return _delete_seen(config, _scan(config, query))


def count(config: CollectionConfig, doc_id: str | None = None) -> int:
    body = {"query": {"term": {"doc_id": doc_id}}} if doc_id else None
    return opensearch_client().count(index=config.index_name, body=body)["count"]


def refresh(config: CollectionConfig) -> None:
    opensearch_client().indices.refresh(index=config.index_name)


READ_FIELDS = ["doc_id", "chunk", "seq", "text", "context", "pages", "section", "title", "metadata"]


def read(config: CollectionConfig, doc_id: str, chunks: tuple[int, int] | None = None,
         pages: tuple[int, int] | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """A document's indexed chunks in order (its newest version only), to read around a hit:
    chunks ``first..last``, or those on pages ``first..last`` (a chunk starting or ending on one
    of them), or the first ones. At most ``limit``."""
    clauses: list[dict[str, Any]] = [{"term": {"doc_id": doc_id}}]
    if chunks is not None:
        clauses.append({"range": {"chunk": {"gte": chunks[0], "lte": chunks[1]}}})
    if pages is not None:
        clauses.append({"range": {"pages": {"gte": pages[0], "lte": pages[1]}}})
    # Two versions coexist briefly while a new one replaces the old (as in search): newest wins.
    body = {"query": {"bool": {"filter": clauses}}, "size": limit * 2, "_source": READ_FIELDS,
            "sort": [{"seq": "desc"}, {"chunk": "asc"}]}
    hits = [h["_source"] for h in opensearch_client().search(index=config.index_name, body=body)["hits"]["hits"]]
    newest = max((h.get("seq", 0) for h in hits), default=0)
    return sorted((h for h in hits if h.get("seq", 0) == newest), key=lambda h: h["chunk"])[:limit]


def contexts_by_text(config: CollectionConfig, doc_id: str, version: str) -> dict[str, str]:
    """A document version's indexed chunks, text -> context (what a rebuild may reuse)."""
    query = {"bool": {"filter": [{"term": {"doc_id": doc_id}}, {"term": {"version": version}}]}}
    out: dict[str, str] = {}
    for hit in helpers.scan(opensearch_client(), index=config.index_name, query={"query": query},
                            _source=["text", "context"], size=500):
        out.setdefault(hit["_source"]["text"], hit["_source"].get("context") or "")
    return out


def point_alias(alias: str, index: str) -> None:
    """``alias`` names ``index`` and nothing else, in one atomic call (searches by the alias
    see the old index or the new one, never neither). An index by the alias's name (a
    collection's first generation) cannot be aliased over: the caller deletes it first."""
    client = opensearch_client()
    actions: list[dict[str, Any]] = []
    if client.indices.exists_alias(name=alias):
        for old in client.indices.get_alias(name=alias):
            if old != index:
                actions.append({"remove": {"index": old, "alias": alias}})
    actions.append({"add": {"index": index, "alias": alias}})
    client.indices.update_aliases(body={"actions": actions})


def left_behind(name: str) -> list[str]:
    """Indexes that name collection ``name`` as their owner (``situate-<name>`` and its
    generations), for when the catalog no longer knows it: Redis lost its data or was flushed,
    and a collection made again under that name would find its index taken."""
    found = opensearch_client().indices.get(index=f"situate-{name}*", expand_wildcards="open,closed",
                                            ignore_unavailable=True, allow_no_indices=True)
    return sorted(index for index, entry in found.items()
                  if (owner_of(index, entry.get("mappings", {})) or {}).get("collection") == name)


def delete_index_named(index: str) -> None:
    opensearch_client().indices.delete(index=index, ignore_unavailable=True)


def all_chunks(config: CollectionConfig, doc_id: str) -> list[dict[str, Any]]:
    """Every indexed chunk of a document's newest version, in order, however many (a scroll)."""
    rows = [h["_source"] for h in helpers.scan(opensearch_client(), index=config.index_name,
                                               query={"query": {"term": {"doc_id": doc_id}}},
                                               _source=READ_FIELDS, size=1000)]
    newest = max((r.get("seq", 0) for r in rows), default=0)
    return sorted((r for r in rows if r.get("seq", 0) == newest), key=lambda r: r["chunk"])
