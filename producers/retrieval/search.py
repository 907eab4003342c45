"""Hybrid search: BM25 and k-NN in one ``_msearch`` round trip, fused, optionally reranked.

BM25 runs over two fields, the chunk's ``text`` (weight 1) and its ``context`` (the
collection's ``context_weight``), so a context adds terms without outvoting the chunk. Each
side returns its top ``candidates``; the sides are fused (``fusion``); a reranker, when asked,
reorders the fused top ``candidates`` (``rerankers``) and the top k are returned.

A page is the unit a reader checks a citation by, and a statement or a table spreads over several
chunks of one page: by default (``distinct_pages``) a page's best chunk stands for it in the
ranking and its other chunks come after every page's first, so the top k name k pages (it
finds more pages on both PDF corpora: ``ops/bench corpora``). Hits without pages (text, code)
keep their order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from producers.retrieval.fusion import Hit, fuse
from workers.connections import opensearch_search_client
from workers.embedding import registry as embedders
from workers.settings import get_settings
from workers.storage import catalog, index_mapping
from workers.storage.catalog import FUSIONS, CollectionConfig

# Each side's candidates, as Anthropic's setup asks before reranking; also without a reranker,
# where fewer a side (a cheaper query in OpenSearch) lost questions on the public corpora
# (docs/decisions.md). ``--candidates`` sets it per query.
CANDIDATES = 150
MODES = ("hybrid", "bm25", "dense")
_SOURCE = ["doc_id", "chunk", "text", "context", "metadata", "seq", "pages", "section", "title"]


@dataclass(frozen=True)
class SearchOptions:
    """How to search a collection; ``None`` fields take the collection's stored defaults."""

    mode: str = "hybrid"
    fusion: str | None = None
    context_weight: float | None = None
    dense_weight: float | None = None
    reranker: str | None = None  # None: the collection's, else SITUATE_RERANKER; "none": no reranking
    candidates: int | None = None  # None: CANDIDATES
    rrf_k: int | None = None
    distinct_pages: bool = True

    def resolved(self, config: CollectionConfig) -> Resolved:
        dense = self.dense_weight if self.dense_weight is not None else config.dense_weight
        opts = Resolved(
            self.mode,
            self.fusion if self.fusion is not None else config.fusion,
            self.context_weight if self.context_weight is not None else config.context_weight,
            dense if dense is not None else auto_dense_weight(config),
            next(r for r in (self.reranker, config.reranker, get_settings().reranker) if r is not None),
            self.candidates or CANDIDATES,
            next((k for k in (self.rrf_k, config.rrf_k) if k is not None), None) or auto_rrf_k(config),
            self.distinct_pages,
        )
        if opts.mode not in MODES:
            raise ValueError(f"unknown search mode {opts.mode!r}; choose one of {MODES}")
        if opts.fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {opts.fusion!r}; choose one of {FUSIONS}")
        if opts.reranker:
            from producers.retrieval import rerankers

            rerankers.check(opts.reranker)
        return opts


@dataclass(frozen=True)
class Resolved(SearchOptions):
    """Options with every default filled in from the collection (``SearchOptions.resolved``)."""

    fusion: str = "rrf"
    context_weight: float = 1.0
    dense_weight: float = 0.5
    reranker: str = "none"
    candidates: int = CANDIDATES
    rrf_k: int = 10


# The local embedders are weak on code and strong on prose: code wants BM25 ahead, prose the
# vectors (``ops/bench corpora``, the dense weight swept on each corpus; docs/decisions.md). A
# collection's weight follows its share of code chunks, geometrically between the two. API
# embedders were not measured on code: neutral there.
DENSE_FOR_PROSE = 1.5
DENSE_FOR_CODE = {"local": 0.5, "local-e5": 0.5, "local-bge": 0.5, "local-multilingual": 0.5}
# RRF's k the same way, by the share of chunks cut from paged documents (PDF pages, slides): text
# wants the sharp k = 10, pages a flatter one, where a document's many similar pages make each
# side's top ranks less sure and agreement between the two sides worth more (the same sweep).
RRF_FOR_TEXT, RRF_FOR_PAGES = 10, 60
_MIX_TTL_S = 30
_mix_cache: dict[str, tuple[float, catalog.Mix]] = {}


def _mix(config: CollectionConfig) -> catalog.Mix:
    cached = _mix_cache.get(config.name)
    if cached is None or time.monotonic() - cached[0] > _MIX_TTL_S:
        cached = (time.monotonic(), catalog.mix(config.name))
        _mix_cache[config.name] = cached
    return cached[1]


def auto_dense_weight(config: CollectionConfig) -> float:
    code = _mix(config).code or 0.0
    for_code = DENSE_FOR_CODE.get(config.embedder, 1.0)
    return round(DENSE_FOR_PROSE ** (1 - code) * for_code ** code, 3)


def auto_rrf_k(config: CollectionConfig) -> int:
    paged = _mix(config).paged or 0.0
    return round(RRF_FOR_TEXT ** (1 - paged) * RRF_FOR_PAGES ** paged)


def filter_clauses(filters: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``{"doc_id": "a"}`` or ``{"lang": ["rust", "go"]}`` -> term(s) filters on metadata."""
    clauses = []
    for key, value in (filters or {}).items():
        name = key if key in ("doc_id", "version") else f"metadata.{key}"
        if isinstance(value, list):
            clauses.append({"terms": {name: value}})
        else:
            clauses.append({"term": {name: value}})
    return clauses


# Candidates are fetched light — ids and three doc values, no stored source to read and parse
# for each side's candidates — and only the hits returned (or reranked) are fetched whole (``_fill``):
# about half the time of an msearch with sources (``ops/bench search``).
_LIGHT = {"_source": False, "docvalue_fields": ["doc_id", "chunk", "seq", "pages"]}


def bm25_body(query: str, filters: list[dict[str, Any]], size: int, context_weight: float,
              light: bool = True) -> dict[str, Any]:
    fields = ["text"] + ([f"context^{context_weight}"] if context_weight > 0 else [])
    match = {"multi_match": {"query": query, "fields": fields, "type": "most_fields"}}
    return {"size": size, **(_LIGHT if light else {"_source": _SOURCE}),
            "query": {"bool": {"must": [match], "filter": filters}}}


# How many graph nodes the HNSW search keeps in view (``ef_search``), against the k it returns.
# At ef = k (OpenSearch's default for Lucene) the search got lost in FinanceBench's index: for one
# question it returned none of the 20 nearest chunks. At 500 its top 20 match exact search's
# nearly always, for a few milliseconds a query (docs/decisions.md).
EF_SEARCH = 500


def knn_body(vector: list[float] | list[int], filters: list[dict[str, Any]], size: int, light: bool = True) -> dict[str, Any]:
    knn: dict[str, Any] = {"vector": vector, "k": size, "method_parameters": {"ef_search": max(EF_SEARCH, size)}}
    if filters:  # Lucene filters during the graph search, so k results survive the filter
        knn["filter"] = {"bool": {"filter": filters}}
    return {"size": size, **(_LIGHT if light else {"_source": _SOURCE}), "query": {"knn": {"vector": knn}}}


def _light_hit(h: dict[str, Any]) -> dict[str, Any]:
    """A light hit shaped as a full one (``_source``), for fusion."""
    if "_source" in h:
        return h
    f = h.get("fields", {})
    pages = f.get("pages")  # doc values come sorted: [first, last]
    return {**h, "_source": {"doc_id": f["doc_id"][0], "chunk": f["chunk"][0], "seq": f.get("seq", [0])[0],
                             "pages": [pages[0], pages[-1]] if pages else None}}


def _fill(config: CollectionConfig, hits: list[Hit]) -> None:
    """The text, context and metadata of the hits to return, in one round trip."""
    if not hits:
        return
    docs = opensearch_search_client().mget(index=config.index_name, body={"ids": [h.id for h in hits]},
                                    _source_includes=["text", "context", "metadata", "pages", "section", "title"])["docs"]
    for hit, doc in zip(hits, docs):
        source = doc.get("_source") or {}
        hit.text, hit.context, hit.metadata = source.get("text", ""), source.get("context", ""), source.get("metadata") or {}
        hit.pages, hit.section, hit.title = source.get("pages"), source.get("section"), source.get("title")


def newest_only(results: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """One version per document: while a new version is being written and the old one not yet
    removed, both may match; only the chunks of the newest (largest ``seq``) are kept."""
    newest: dict[str, int] = {}
    for hits in results.values():
        for h in hits:
            doc, seq = h["_source"]["doc_id"], h["_source"].get("seq", 0)
            newest[doc] = max(newest.get(doc, seq), seq)
    return {side: [h for h in hits if h["_source"].get("seq", 0) == newest[h["_source"]["doc_id"]]]
            for side, hits in results.items()}


def search(config: CollectionConfig, query: str, k: int = 10, filters: dict[str, Any] | None = None,
           mode: str = "hybrid", candidates: int = CANDIDATES,
           options: SearchOptions | None = None, timings: dict[str, float] | None = None) -> list[Hit]:
    """Top ``k`` chunks for ``query``. ``options`` overrides the collection's defaults; the
    ``mode`` and ``candidates`` arguments are shorthands for the common case. ``timings``, if
    given, is filled with milliseconds per step (embed, opensearch, fusion, fetch, rerank)."""
    opts = (options or SearchOptions(mode=mode, candidates=candidates)).resolved(config)
    if not query.strip():
        return []
    clauses = filter_clauses(filters)
    size = max(opts.candidates, k)
    sides: dict[str, dict[str, Any]] = {}
    clock = time.perf_counter()
    if opts.mode in ("hybrid", "bm25"):
        sides["bm25"] = bm25_body(query, clauses, size, opts.context_weight)
    if opts.mode in ("hybrid", "dense"):
        vector = embedders.get(config.embedder, config.embed_model).embed_query(query)
        sides["dense"] = knn_body(index_mapping.stored_vector(config, vector), clauses, size)
        clock = _lap(timings, "embed", clock)
    lines: list[dict[str, Any]] = []
    for body in sides.values():
        lines += [{"index": config.index_name}, body]
    clock = time.perf_counter()
    responses = opensearch_search_client().msearch(body=lines)["responses"]
    results = {}
    for side, response in zip(sides, responses):
        if "error" in response:
            raise RuntimeError(f"{side} search failed: {response['error']}")
        results[side] = [_light_hit(h) for h in response["hits"]["hits"]]
    clock = _lap(timings, "opensearch", clock)
    fused = fuse(newest_only(results), {"bm25": 1.0, "dense": opts.dense_weight}, opts.fusion, opts.rrf_k)
    reranking = bool(opts.reranker and opts.reranker != "none")
    if opts.distinct_pages and not reranking:
        fused = distinct_pages(fused)
    kept = fused[:opts.candidates] if reranking else fused[:k]
    clock = _lap(timings, "fusion", clock)
    _fill(config, kept)
    clock = _lap(timings, "fetch", clock)
    if reranking:
        from producers.retrieval import rerankers

        kept = rerankers.rerank(opts.reranker, query, kept)
        if opts.distinct_pages:
            kept = distinct_pages(kept)
        _lap(timings, "rerank", clock)
    return kept[:k]


def distinct_pages(hits: list[Hit]) -> list[Hit]:
    """Each page's first hit where it stands, the page's other hits after every page's first (in
    their order): the top k name k pages. Hits without pages keep their places."""
    seen: set[tuple[str, int]] = set()
    first: list[Hit] = []
    again: list[Hit] = []
    for hit in hits:
        if not hit.pages:
            first.append(hit)
            continue
        key = (hit.doc_id, hit.pages[0])
        (again if key in seen else first).append(hit)
        seen.add(key)
    return first + again


def _lap(timings: dict[str, float] | None, name: str, since: float) -> float:
    now = time.perf_counter()
    if timings is not None:
        timings[name] = timings.get(name, 0.0) + (now - since) * 1000
    return now
