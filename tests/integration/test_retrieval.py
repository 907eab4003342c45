"""Retrieval quality features against real OpenSearch: fields and fusion, every embedder and
reranker through its stand-in and real client, and ``situate eval``. Search runs in-process;
the CLI is run where the command line itself is under test."""

from __future__ import annotations

import json

import pytest

from producers.retrieval.search import SearchOptions, search
from tests.support import ingest, run_cli, write_jsonl
from workers.storage import catalog, chunk_index

DOCS = [
    {"id": "otters", "text": "# Sea otters\n\nSea otters hold hands while they sleep so they do not drift apart. "
                             "They eat urchins and crabs, and use stones as tools to open shells."},
    {"id": "kernel", "text": "# Kernels\n\nThe kernel schedules processes and manages memory pages for each "
                             "program; interrupts hand control back to the scheduler."},
    {"id": "parser", "text": "def parseHttpHeader(raw_line):\n    name, _, value = raw_line.partition(':')\n"
                             "    return name.strip().lower(), value.strip()\n"},
    {"id": "bread", "text": "# Bread\n\nSourdough bread rises with wild yeast; flour, water and salt, "
                            "then a long slow fermentation overnight."},
]


def _ingest(collection: str, docs=DOCS, **settings) -> None:
    final = ingest(collection, docs, **settings)
    assert len(final) == len(docs) and all(d["state"] == "indexed" for d in final.values()), final


def _search(collection: str, query: str, k: int = 4, **options) -> list:
    return search(catalog.load(collection), query, k=k, options=SearchOptions(**options))


# -- fields and fusion ---------------------------------------------------------------------------

def test_identifiers_are_split_and_context_is_a_weighted_field(worker, collection_name):
    _ingest(collection_name, contextualizer="keywords")
    config = catalog.load(collection_name)
    assert (config.context_weight, config.dense_weight, config.fusion, config.rrf_k, config.embed_context) == (
        1.0, None, "rrf", None, False)
    # The dense weight and RRF's k follow what the collection holds: these four documents are
    # mostly prose, and text (no page): RRF's sharp k.
    from producers.retrieval.search import SearchOptions

    resolved = SearchOptions().resolved(config)
    assert 0.5 < resolved.dense_weight <= 1.5 and resolved.rrf_k == 10
    # camelCase / snake_case identifiers are found by their words (BM25 alone).
    assert _search(collection_name, "http header", mode="bm25")[0].doc_id == "parser"
    # A word that only the context of a chunk carries is found through the context field,
    # and only through it: chunk 1 of "starter" never says "sourdough", its context does.
    _ingest(collection_name, [{"id": "starter",
                               "text": "Sourdough starter: feed flour and water daily.\n\nBake hot for a crisp crust.",
                               "chunks": ["Sourdough starter: feed flour and water daily.", "Bake hot for a crisp crust."]}])
    found = {(h.doc_id, h.chunk) for h in _search(collection_name, "sourdough", mode="bm25")}
    unweighted = {(h.doc_id, h.chunk) for h in _search(collection_name, "sourdough", mode="bm25", context_weight=0)}
    assert ("starter", 1) in found and ("starter", 1) not in unweighted and ("starter", 0) in unweighted
    # Both fusions run and agree on an easy query; a bad option is refused with a reason.
    for fusion in ("rrf", "weighted"):
        assert _search(collection_name, "why do sea otters hold hands", fusion=fusion)[0].doc_id == "otters"
    with pytest.raises(ValueError, match="fusion"):
        _search(collection_name, "otters", fusion="borda")
    assert chunk_index.count(config) >= len(DOCS)


def test_the_search_command_prints_hits_and_refuses_bad_options(worker, collection_name):
    _ingest(collection_name, contextualizer="keywords")
    result = run_cli("search", "--collection", collection_name, "--k", "2", "--json", "why do otters hold hands")
    assert result.returncode == 0, result.stderr
    hits = json.loads(result.stdout)["hits"]
    assert len(hits) == 2 and hits[0]["doc_id"] == "otters" and set(hits[0]) == {
        "doc_id", "chunk", "score", "text", "context", "metadata", "title", "pages", "section"}
    bad = run_cli("search", "--collection", collection_name, "--fusion", "borda", "otters")
    assert bad.returncode != 0 and "fusion" in bad.stderr
    bad = run_cli("search", "--collection", collection_name, "--reranker", "magic", "otters")
    assert bad.returncode == 2 and "reranker" in bad.stderr


def test_changing_settings_of_a_collection_is_refused_with_the_remedy(worker, collection_name, tmp_path):
    _ingest(collection_name, contextualizer="none")
    path = write_jsonl(tmp_path / "docs.jsonl", DOCS)
    again = run_cli("ingest", "--collection", collection_name, "--embedder", "voyage", path)
    assert again.returncode == 2 and "new collection" in again.stderr and "embedder" in again.stderr
    # Search defaults are fixed too, but the remedy is a per-query option, not a new collection.
    weights = run_cli("ingest", "--collection", collection_name, "--dense-weight", "0.3", path)
    assert weights.returncode == 2 and "per query" in weights.stderr.replace("\n", " ")


# -- embedders through their stand-ins ----------------------------------------------------------

@pytest.mark.parametrize("embedder,model", [("voyage", ""), ("voyage-context", ""), ("bedrock", ""),
                                            ("bedrock", "cohere.embed-english-v3")])
def test_api_embedders_through_the_real_clients(standin, worker, collection_name, embedder, model):
    standin.configure()
    # A 429 then a 503 before the first embedding: the client retries, nothing fails.
    standin.http.post("/standin/vector_faults", json={"count": 1, "status": 429}).raise_for_status()
    _ingest(collection_name, contextualizer="none", embedder=embedder, embed_model=model or None)
    from workers.connections import opensearch_client

    config = catalog.load(collection_name)
    mapping = opensearch_client().indices.get_mapping(index=config.index_name)[config.index_name]["mappings"]
    assert mapping["properties"]["vector"]["dimension"] == 1024
    standin.http.post("/standin/vector_faults", json={"count": 1, "status": 503}).raise_for_status()
    hits = _search(collection_name, "what do sea otters eat urchins crabs", mode="dense")
    assert hits[0].doc_id == "otters"
    counts = standin.stats()["vectors"]
    assert counts.get("http_429") == 1 and counts.get("http_503") == 1
    if embedder == "bedrock" and model.startswith("cohere"):
        assert counts["input_type_search_document"] >= 1 and counts["input_type_search_query"] == 1
    elif embedder.startswith("voyage"):
        assert counts["input_type_document"] >= 1 and counts["input_type_query"] == 1
    if embedder == "voyage-context":
        assert counts["documents"] >= len(DOCS)  # one input per document: its chunks together


def test_local_multilingual_embedder_for_a_french_collection(worker, collection_name):
    docs = [{"id": "loutres", "text": "Les loutres de mer se tiennent par la main pendant leur sommeil."},
            {"id": "pain", "text": "Le pain au levain lève grâce aux levures sauvages pendant la nuit."},
            {"id": "brot", "text": "Sauerteigbrot geht über Nacht mit wilder Hefe auf."}]
    _ingest(collection_name, docs, contextualizer="none", embedder="local-multilingual", language="french")
    assert _search(collection_name, "pourquoi les loutres dorment main dans la main", mode="dense")[0].doc_id == "loutres"
    # Cross-lingual: a German question finds the French bread before the otters.
    ranked = [h.doc_id for h in _search(collection_name, "Wie geht Brot mit Hefe auf?", mode="dense")]
    assert ranked.index("pain") < ranked.index("loutres")


# -- rerankers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("reranker", ["voyage", "bedrock", "cohere"])
def test_api_rerankers_reorder_the_fused_candidates(standin, worker, collection_name, reranker):
    standin.configure()
    _ingest(collection_name, contextualizer="none")
    # The stand-in's reranker scores the share of query words in the chunk: "slow" and
    # "overnight" only appear in the bread document, which plain fusion does not put first.
    query = "sea otters tools shells slow fermentation overnight flour water salt"
    plain = _search(collection_name, query, reranker="none")
    reranked = _search(collection_name, query, reranker=reranker)
    assert reranked[0].doc_id == "bread" and sorted(h.doc_id for h in reranked) == sorted(h.doc_id for h in plain)
    scores = [h.score for h in reranked]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1
    counts = standin.stats()["vectors"]
    route = {"voyage": "voyage_rerank_requests", "bedrock": "bedrock_invoke_requests", "cohere": "cohere_rerank_requests"}
    assert counts[route[reranker]] == 1


# -- situate tune --------------------------------------------------------------------------------

def test_tune_grades_held_out_tries_the_reranker_and_applies_the_winner(standin, worker, collection_name, tmp_path):
    standin.configure()
    _ingest(collection_name, contextualizer="keywords")
    queries = tmp_path / "labels.jsonl"
    asks = [("otters hold hands", "otters"), ("stones as tools", "otters"), ("urchins and crabs", "otters"),
            ("process scheduler", "kernel"), ("memory pages", "kernel"), ("interrupts", "kernel"),
            ("parse an http header", "parser"), ("partition raw line", "parser"),
            ("wild yeast", "bread"), ("slow fermentation overnight", "bread")]
    queries.write_text("\n".join(json.dumps({"query": q, "gold": [{"doc_id": d, "chunk": 0}]}) for q, d in asks))
    result = run_cli("tune", "-c", collection_name, "--queries", str(queries), "--format", "jsonl", "--folds", "2",
                     "--reranker", "voyage", "--apply", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["queries"] == 10 and report["folds"] == 2 and len(report["fold_winners"]) == 2 and report["applied"]
    assert report["held_out"]["pass@20"] == 100.0  # four documents: every one is in the top 20
    # Each query's candidates were scored once, not once per setting tried.
    assert standin.stats()["vectors"]["voyage_rerank_requests"] == 10
    winner, stored = report["winner"], catalog.load(collection_name)
    assert (stored.fusion, stored.dense_weight, stored.context_weight, stored.reranker) == (
        winner["fusion"], winner["dense_weight"], winner["context_weight"], winner["reranker"])
    refused = run_cli("tune", "-c", collection_name, "--queries", str(queries), "--format", "jsonl",
                      "--reranker", "nope")
    assert refused.returncode != 0 and "unknown reranker" in refused.stderr


# -- situate eval --------------------------------------------------------------------------------

def test_eval_compares_collections_with_a_report(worker, collection_name, tmp_path):
    plain, contextual = collection_name, collection_name + "-kw"
    try:
        _ingest(plain, contextualizer="none")
        _ingest(contextual, contextualizer="keywords")
        queries = tmp_path / "labels.jsonl"
        queries.write_text("\n".join(json.dumps(q) for q in [
            {"query": "why do otters hold hands", "gold": [{"doc_id": "otters", "chunk": 0}]},
            {"query": "how is memory managed", "gold": [{"doc_id": "kernel", "text": "manages memory pages for each program"}]},
            {"query": "wild yeast", "gold": [{"doc_id": "bread", "text": "Sourdough bread rises with wild yeast"}]},
        ]))
        report = tmp_path / "report"
        result = run_cli("eval", "-c", plain, "-c", contextual, "--queries", str(queries), "--format", "jsonl",
                         "--configs", "bm25,hybrid", "--report", str(report), "--json")
        assert result.returncode == 0, result.stderr
        payload = json.loads(result.stdout)
        labels = [r["config"] for r in payload["results"]]
        assert labels == [f"{plain}:bm25", f"{plain}:hybrid", f"{contextual}:bm25", f"{contextual}:hybrid"]
        for r in payload["results"]:
            assert r["pass@20"] == 100.0 and r["recall@20"] == 100.0 and 0 < r["mrr@10"] <= 1
        assert payload["flips"]["before"] == f"{plain}:hybrid" and payload["flips"]["after"] == f"{contextual}:hybrid"
        text = (report / "report.md").read_text()
        assert f"| {contextual}:hybrid |" in text and "Recall@10" in text and "MRR@10" in text
        assert (report / "pass_at_k.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"query": "x"}\n')
        refused = run_cli("eval", "-c", plain, "--queries", str(bad), "--format", "jsonl")
        assert refused.returncode == 2 and "bad.jsonl:1" in refused.stderr
    finally:
        from workers import lifecycle

        if catalog.exists(contextual):
            lifecycle.delete(contextual)
