"""The OpenSearch index of a collection: its mapping (the one place it is defined) and writes.

One index per collection, ``situate-<name>``. Each chunk is one OpenSearch document with a
deterministic ``_id`` (collection, doc_id, chunk number), so a redelivered task or a re-ingest
overwrites instead of duplicating. The raw chunk (``text``) and its context (``context``) are
separate BM25 fields, weighted at query time (see ``search``), so a weak context adds terms
without drowning the chunk; ``vector`` is the embedding, HNSW in Lucene (pure Java: the
Maven build of k-NN has no native faiss/nmslib libraries).

The analyzers are code-aware: identifiers are split at case and underscore changes
(``parseHttpHeader`` also indexes ``parse``, ``http``, ``header``) with the original kept, then
lowercased, stopped and stemmed for the collection's language. Measured on the cookbook corpus
(plain chunks, BM25 alone, Pass@10): 74.96 with OpenSearch's ``english`` analyzer, 84.87 with
this one; on prose the split does nothing, so it costs nothing there.
"""

from __future__ import annotations

from typing import Any

from opensearchpy import helpers

from workers.collections import CollectionConfig
from workers.connections import opensearch_client
from workers.documents import chunk_id
from workers import embedders


# Per language: the filters after the identifier split (all from analysis-common).
_LANGUAGE_FILTERS: dict[str, list[str]] = {
    "english": ["lowercase", "stop_english", "possessive_english", "stem_english"],
    "french": ["elision", "lowercase", "stop_french", "stem_french"],
    "german": ["lowercase", "stop_german", "german_normalization", "stem_german"],
}


def analysis(language: str) -> dict[str, Any]:
    """Index and search analyzers: the same chain, the index one flattened (a graph filter's
    output must be flattened before it is written, not before it is searched)."""
    split = ["split_identifiers"]
    filters = _LANGUAGE_FILTERS[language]
    return {
        "filter": {
            "split_identifiers": {"type": "word_delimiter_graph", "preserve_original": True,
                                  "split_on_numerics": False, "stem_english_possessive": False},
            "stop_english": {"type": "stop", "stopwords": "_english_"},
            "stop_french": {"type": "stop", "stopwords": "_french_"},
            "stop_german": {"type": "stop", "stopwords": "_german_"},
            "possessive_english": {"type": "stemmer", "language": "possessive_english"},
            "stem_english": {"type": "stemmer", "language": "english"},
            "stem_french": {"type": "stemmer", "language": "light_french"},
            "stem_german": {"type": "stemmer", "language": "light_german"},
        },
        "analyzer": {
            "situate_index": {"tokenizer": "standard", "filter": split + ["flatten_graph"] + filters},
            "situate_search": {"tokenizer": "standard", "filter": split + filters},
        },
    }


def mapping(config: CollectionConfig) -> dict[str, Any]:
    text = {"type": "text", "analyzer": "situate_index", "search_analyzer": "situate_search"}
    return {
        "settings": {
            "index": {"knn": True, "number_of_shards": 1, "number_of_replicas": 0,
                      "refresh_interval": "1s"},
            "analysis": analysis(config.language),
        },
        "mappings": {
            "_meta": {"situate": config.model_dump()},
            "dynamic": "strict",
            "properties": {
                "doc_id": {"type": "keyword"},
                "chunk": {"type": "integer"},
                "version": {"type": "keyword"},
                "text": text,
                "context": text,
                "start": {"type": "integer", "index": False},
                "end": {"type": "integer", "index": False},
                # Users' metadata: strings become keywords (exact filters), numbers stay numbers.
                "metadata": {"type": "object", "dynamic": True},
                "vector": {
                    "type": "knn_vector",
                    "dimension": embedders.dimension(config.embedder, config.embed_model),
                    "method": {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil",
                               "parameters": {"m": 16, "ef_construction": 128}},
                },
            },
            "dynamic_templates": [
                {"metadata_strings": {"path_match": "metadata.*", "match_mapping_type": "string",
                                      "mapping": {"type": "keyword", "ignore_above": 1024}}},
            ],
        },
    }


def ensure_index(config: CollectionConfig) -> None:
    client = opensearch_client()
    if client.indices.exists(index=config.index_name):
        return
    try:
        client.indices.create(index=config.index_name, body=mapping(config))
    except Exception as e:  # created meanwhile by another process: fine
        if "resource_already_exists_exception" not in str(e):
            raise


def delete_index(config: CollectionConfig) -> None:
    opensearch_client().indices.delete(index=config.index_name, ignore_unavailable=True)


def write_chunks(config: CollectionConfig, doc_id: str, version: str, rows: list[dict[str, Any]],
                 metadata: dict[str, Any]) -> None:
    """Bulk-index one document's chunks. Raises if any row is refused: a document is either
    fully written at this version or reported failed."""
    actions = [
        {
            "_op_type": "index",
            "_index": config.index_name,
            "_id": chunk_id(config.name, doc_id, row["n"]),
            "_source": {
                "doc_id": doc_id, "chunk": row["n"], "version": version, "text": row["text"],
                "context": row["context"],
                "start": row.get("start"), "end": row.get("end"), "metadata": metadata,
                "vector": [float(x) for x in row["vector"]],
            },
        }
        for row in rows
    ]
    _, errors = helpers.bulk(opensearch_client(), actions, chunk_size=200, raise_on_error=False,
                             max_retries=3)
    if errors:
        first = errors[0].get("index", errors[0])
        raise RuntimeError(f"OpenSearch refused {len(errors)} chunk(s): {first.get('error')}")


def delete_stale(config: CollectionConfig, doc_id: str, keep_version: str, keep_chunks: set[int],
                 previous_chunks: int = 0) -> int:
    """Remove the chunks of older versions of a document, once the new version is written.

    Two sources of stale ids: the chunk numbers the previous version had beyond the new ones
    (known from its recorded count, visible or not yet refreshed), and a search for other
    versions of the document. Ids just written are never deleted: a search may still see their
    previous version until the next refresh. Search-then-delete rather than
    ``_delete_by_query``: that lives in the reindex module, which our Maven-assembled node
    does not carry.
    """
    client = opensearch_client()
    keep = {chunk_id(config.name, doc_id, n) for n in keep_chunks}
    stale = {chunk_id(config.name, doc_id, n) for n in range(previous_chunks) if n not in keep_chunks}
    query = {"bool": {"filter": [{"term": {"doc_id": doc_id}}],
                      "must_not": [{"term": {"version": keep_version}}]}}
    stale.update(h["_id"] for h in helpers.scan(client, index=config.index_name, query={"query": query},
                                                _source=False, size=1000))
    stale -= keep
    if stale:
        helpers.bulk(client, ({"_op_type": "delete", "_index": config.index_name, "_id": i} for i in stale),
                     raise_on_error=False)
    return len(stale)


def count(config: CollectionConfig, doc_id: str | None = None) -> int:
    body = {"query": {"term": {"doc_id": doc_id}}} if doc_id else None
    return opensearch_client().count(index=config.index_name, body=body)["count"]


def refresh(config: CollectionConfig) -> None:
    opensearch_client().indices.refresh(index=config.index_name)
