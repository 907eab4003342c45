"""A collection's OpenSearch index as it is defined: settings, analyzers, fields — the one place
(``chunk_index`` creates it, writes to it and reads it back).

The analyzers are code-aware: identifiers are split at case and underscore changes
(``parseHttpHeader`` also indexes ``parse``, ``http``, ``header``) with the original kept, then
lowercased, stopped and stemmed for the collection's language; on prose the split does nothing,
so it costs nothing there (``ops/bench corpora`` compares it with OpenSearch's own analyzers:
docs/benchmarks.md). The vector is HNSW in Lucene (pure Java: the Maven build of k-NN has no native
faiss/nmslib libraries), stored as the collection's ``vectors`` says.
"""

from __future__ import annotations

from typing import Any

from workers.embedding import registry as embedders
from workers.storage.catalog import CollectionConfig

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


def replicas(spec: str) -> dict[str, Any]:
    """"1": that many copies; "0-1", "0-all": as many as the nodes allow, within the range."""
    if "-" in spec:
        return {"auto_expand_replicas": spec}
    return {"number_of_replicas": int(spec), "auto_expand_replicas": False}


# Where a chunk came from, shown with every hit: its pages [first, last], the heading path it
# starts under, and its document's title. Added in place to indexes made before they existed.
CITATION_FIELDS: dict[str, Any] = {
    "pages": {"type": "integer"},
    "section": {"type": "keyword", "ignore_above": 2048},
    "title": {"type": "keyword", "ignore_above": 1024},
}


def mapping(config: CollectionConfig) -> dict[str, Any]:
    text = {"type": "text", "analyzer": "situate_index", "search_analyzer": "situate_search"}
    return {
        "settings": {
            "index": {"knn": True, "number_of_shards": config.index_shards, **replicas(config.index_replicas),
                      "refresh_interval": "1s"},
            "analysis": analysis(config.language),
        },
        "mappings": {
            "_meta": {"situate": config.model_dump(), "owner": owner(config)},
            "dynamic": "strict",
            # The vector lives in the k-NN structure; kept out of the stored source, which every
            # fetched hit would otherwise decompress and send (384+ floats as JSON).
            "_source": {"excludes": ["vector"]},
            "properties": {
                "doc_id": {"type": "keyword"},
                "chunk": {"type": "integer"},
                "version": {"type": "keyword"},
                "seq": {"type": "long"},  # submission order: a newer version has a larger one
                "text": text,
                "context": text,
                "start": {"type": "integer", "index": False},
                "end": {"type": "integer", "index": False},
                **CITATION_FIELDS,
                # Users' metadata, one field however many keys it has (a dynamic mapping would
                # let one document with a thousand keys use up the index's field limit for the
                # whole collection); its leaves are keywords, filtered as ``metadata.<key>``.
                "metadata": {"type": "flat_object"},
                "vector": vector_field(config),
            },
        },
    }


def vector_field(config: CollectionConfig) -> dict[str, Any]:
    """The k-NN field, by the collection's vector storage. This OpenSearch is assembled without
    k-NN's native libraries (faiss, nmslib): every choice is Lucene's HNSW, in Java.

    - ``float``: exact 32-bit floats (4 bytes a dimension), the default;
    - ``lucene-sq``: Lucene's scalar quantisation, int7 per dimension for the graph search, the
      floats kept on disk beside them (to re-quantise at merges): ~4x less memory to search in;
    - ``byte``: vectors quantised by us to int8 (``stored_vector``, unit vectors x 127), stored
      and searched as bytes: ~4x less memory and disk.
    """
    method: dict[str, Any] = {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil",
                              "parameters": {"m": 16, "ef_construction": 128}}
    field: dict[str, Any] = {"type": "knn_vector", "dimension": embedders.dimension(config.embedder, config.embed_model),
                             "method": method}
    if config.vectors == "lucene-sq":
        method["parameters"]["encoder"] = {"name": "sq", "parameters": {"confidence_interval": 1.0}}
    elif config.vectors == "byte":
        field["data_type"] = "byte"
    return field


# A shard's size to aim for: OpenSearch's guidance for search is 10-50 GB a shard (smaller ones
# multiply per-shard overhead and a query's fan-out; larger ones are slow to move and recover).
SHARD_TARGET_BYTES = 20 * 2**30
# An index's bytes on disk per chunk and vector dimension, by vector storage: the vector, its
# graph and OpenSearch's JSON copy of it for recovery outweigh the text (``ops/bench vectors``).
DISK_BYTES_PER_DIMENSION = {"float": 28, "lucene-sq": 29, "byte": 7}


def shards_for(expected_chunks: int, config: CollectionConfig) -> int:
    """Primary shards for a collection expected to hold ``expected_chunks``: one per
    ``SHARD_TARGET_BYTES`` of index, at least one. A shard count is fixed for an index's life, so
    it is chosen for the size the collection will reach (``situate reindex --index-shards``
    changes it later, by a rebuild)."""
    dims = embedders.dimension(config.embedder, config.embed_model)
    expected_bytes = expected_chunks * dims * DISK_BYTES_PER_DIMENSION.get(config.vectors, 28)
    return max(1, min(64, -(-expected_bytes // SHARD_TARGET_BYTES)))


def stored_vector(config: CollectionConfig, vector: Any) -> list[float] | list[int]:
    """A vector as the index takes it (documents and queries alike)."""
    if config.vectors == "byte":
        return [max(-128, min(127, round(float(x) * 127))) for x in vector]
    return [float(x) for x in vector]


def owner(config: CollectionConfig) -> dict[str, str]:
    """What an index's ``_meta`` says of the collection that owns it."""
    return {"collection": config.base_name, "id": config.owner_id}
