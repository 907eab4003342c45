"""Retrieval quality features: fields and fusion, every embedder and reranker through its
stand-in and real client, and ``situate eval`` (metrics, flips, report, JSONL labels)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_cli
from producers.evaluate import Gold, LabelledQuery, Retrieved, evaluate, flips, markdown_report

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


def _ingest(collection: str, tmp_path, *flags: str, docs=DOCS) -> None:
    path = tmp_path / f"{collection}.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in docs))
    result = run_cli("ingest", "--collection", collection, str(path), "--json", *flags)
    assert result.returncode == 0, result.stderr + result.stdout
    assert json.loads(result.stdout)["indexed"] == len(docs)


def _search(collection: str, query: str, *flags: str) -> list[dict]:
    result = run_cli("search", "--collection", collection, "--k", "4", "--json", *flags, query)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["hits"]


# -- metrics (no services) ----------------------------------------------------------------------

def test_metrics_pass_recall_mrr_and_text_labels():
    queries = [LabelledQuery("q1", [Gold("a", 0), Gold("a", 1)]),          # 2 labels
               LabelledQuery("q2", [Gold("b", 5)]),
               LabelledQuery("q3", [Gold("c", text="the quick brown fox jumps")])]
    rankings = {"q1": [Retrieved("x", 0)] * 6 + [Retrieved("a", 1)],       # one of two, at rank 7
                "q2": [Retrieved("b", 5)],                                  # rank 1
                "q3": [Retrieved("c", 9, "a quick brown fox jumps high")]}  # 4 of 5 words: found
    result = evaluate(queries, lambda q, k: rankings[q], "test")
    assert result.pass_at[5] == pytest.approx(100 * (0 + 1 + 1) / 3)
    assert result.pass_at[10] == pytest.approx(100 * (0.5 + 1 + 1) / 3)
    assert result.recall_at[10] == pytest.approx(100 * 3 / 4)             # per golden chunk
    assert result.mrr == pytest.approx((1 / 7 + 1 + 1) / 3)
    assert result.per_query[0]["gold_ranks"] == [None, 7]

    # Text labels need the same document and half the label's words.
    miss = evaluate(queries[2:], lambda q, k: [Retrieved("c", 1, "a lazy dog"), Retrieved("d", 2, "quick brown fox jumps")])
    assert miss.pass_at[20] == 0

    better = evaluate(queries, lambda q, k: [Retrieved("a", 0), Retrieved("a", 1), Retrieved("b", 5)], "better")
    gained, lost = flips(result, better)
    assert [f.query for f in gained] == ["q1"] and [f.query for f in lost] == ["q3"]
    report = markdown_report([result, better], (result, better), "t")
    assert "| test |" in report and "### Gained" in report and "- q1 —" in report and "### Lost" in report


# -- fields and fusion ---------------------------------------------------------------------------

def test_identifiers_are_split_and_context_is_a_weighted_field(worker, collection_name, tmp_path):
    _ingest(collection_name, tmp_path, "--contextualizer", "keywords")
    from workers import collections, index

    config = collections.load(collection_name)
    assert (config.context_weight, config.dense_weight, config.fusion, config.embed_context) == (1.0, 0.5, "rrf", False)
    # camelCase / snake_case identifiers are found by their words (BM25 alone).
    assert _search(collection_name, "http header", "--mode", "bm25")[0]["doc_id"] == "parser"
    # A word that only the context of a chunk carries is found through the context field,
    # and only through it: chunk 1 of "starter" never says "sourdough", its context does.
    starter = [{"id": "starter", "text": "Sourdough starter: feed flour and water daily.\n\nBake hot for a crisp crust.",
                "chunks": ["Sourdough starter: feed flour and water daily.", "Bake hot for a crisp crust."]}]
    path = tmp_path / "starter.jsonl"
    path.write_text(json.dumps(starter[0]))
    assert run_cli("ingest", "--collection", collection_name, str(path)).returncode == 0
    found = {(h["doc_id"], h["chunk"]) for h in _search(collection_name, "sourdough", "--mode", "bm25")}
    unweighted = {(h["doc_id"], h["chunk"]) for h in _search(collection_name, "sourdough", "--mode", "bm25",
                                                             "--context-weight", "0")}
    assert ("starter", 1) in found and ("starter", 1) not in unweighted and ("starter", 0) in unweighted
    # Both fusions run and agree on an easy query; a bad option is refused with a reason.
    for fusion in ("rrf", "weighted"):
        assert _search(collection_name, "why do sea otters hold hands", "--fusion", fusion)[0]["doc_id"] == "otters"
    bad = run_cli("search", "--collection", collection_name, "--fusion", "borda", "otters")
    assert bad.returncode != 0 and "fusion" in bad.stderr
    assert index.count(config) >= len(DOCS)


def test_changing_settings_of_a_collection_is_refused_with_the_remedy(worker, collection_name, tmp_path):
    _ingest(collection_name, tmp_path, "--contextualizer", "none")
    again = run_cli("ingest", "--collection", collection_name, "--embedder", "voyage", str(tmp_path / f"{collection_name}.jsonl"))
    assert again.returncode == 2 and "new collection" in again.stderr and "embedder" in again.stderr
    # Search defaults are fixed too, but the remedy is a per-query option, not a new collection.
    weights = run_cli("ingest", "--collection", collection_name, "--dense-weight", "0.3",
                      str(tmp_path / f"{collection_name}.jsonl"))
    assert weights.returncode == 2 and "per query" in weights.stderr.replace("\n", " ")


# -- embedders through their stand-ins ----------------------------------------------------------

@pytest.mark.parametrize("embedder,model", [("voyage", ""), ("voyage-context", ""), ("bedrock", ""),
                                            ("bedrock", "cohere.embed-english-v3")])
def test_api_embedders_through_the_real_clients(standin, worker, collection_name, tmp_path, embedder, model):
    standin.configure()
    flags = ["--contextualizer", "none", "--embedder", embedder] + (["--embed-model", model] if model else [])
    # A 429 then a 503 before the first embedding: the client retries, nothing fails.
    standin.http.post("/standin/vector_faults", json={"count": 1, "status": 429}).raise_for_status()
    _ingest(collection_name, tmp_path, *flags)
    from workers import collections
    from workers.connections import opensearch_client

    config = collections.load(collection_name)
    mapping = opensearch_client().indices.get_mapping(index=config.index_name)[config.index_name]["mappings"]
    assert mapping["properties"]["vector"]["dimension"] == 1024
    standin.http.post("/standin/vector_faults", json={"count": 1, "status": 503}).raise_for_status()
    hits = _search(collection_name, "what do sea otters eat urchins crabs", "--mode", "dense")
    assert hits[0]["doc_id"] == "otters"
    counts = standin.stats()["vectors"]
    assert counts.get("http_429") == 1 and counts.get("http_503") == 1
    if embedder == "bedrock" and model.startswith("cohere"):
        assert counts["input_type_search_document"] >= 1 and counts["input_type_search_query"] == 1
    elif embedder.startswith("voyage"):
        assert counts["input_type_document"] >= 1 and counts["input_type_query"] == 1
    if embedder == "voyage-context":
        assert counts["documents"] >= len(DOCS)  # one input per document: its chunks together


def test_local_multilingual_embedder_for_a_french_collection(worker, collection_name, tmp_path):
    docs = [{"id": "loutres", "text": "Les loutres de mer se tiennent par la main pendant leur sommeil."},
            {"id": "pain", "text": "Le pain au levain lève grâce aux levures sauvages pendant la nuit."},
            {"id": "brot", "text": "Sauerteigbrot geht über Nacht mit wilder Hefe auf."}]
    _ingest(collection_name, tmp_path, "--contextualizer", "none", "--embedder", "local-multilingual",
            "--language", "french", docs=docs)
    assert _search(collection_name, "pourquoi les loutres dorment main dans la main", "--mode", "dense")[0]["doc_id"] == "loutres"
    # Cross-lingual: a German question finds the French bread before the otters.
    ranked = [h["doc_id"] for h in _search(collection_name, "Wie geht Brot mit Hefe auf?", "--mode", "dense")]
    assert ranked.index("pain") < ranked.index("loutres")


# -- rerankers -----------------------------------------------------------------------------------

@pytest.mark.parametrize("reranker", ["voyage", "bedrock", "cohere"])
def test_api_rerankers_reorder_the_fused_candidates(standin, worker, collection_name, tmp_path, reranker):
    standin.configure()
    _ingest(collection_name, tmp_path, "--contextualizer", "none")
    # The stand-in's reranker scores the share of query words in the chunk: "slow" and
    # "overnight" only appear in the bread document, which plain fusion does not put first.
    query = "sea otters tools shells slow fermentation overnight flour water salt"
    plain = _search(collection_name, query, "--reranker", "none")
    reranked = _search(collection_name, query, "--reranker", reranker)
    assert reranked[0]["doc_id"] == "bread" and sorted(h["doc_id"] for h in reranked) == sorted(h["doc_id"] for h in plain)
    scores = [h["score"] for h in reranked]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1
    counts = standin.stats()["vectors"]
    route = {"voyage": "voyage_rerank_requests", "bedrock": "bedrock_invoke_requests", "cohere": "cohere_rerank_requests"}
    assert counts[route[reranker]] == 1


def test_onnx_cross_encoder_file(collection_name, tmp_path, monkeypatch):
    """A tiny cross-encoder built here (the logit counts one token id in the pair) proves the
    path: tokenizer beside the file, pairs in, first output as the score."""
    import onnx  # the [test] extra
    from onnx import TensorProto, helper

    from workers.chunking import TOKENIZER_PATH
    from tokenizers import Tokenizer

    target = Tokenizer.from_file(str(TOKENIZER_PATH)).token_to_id("otter")
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["t"], value=helper.make_tensor("t", TensorProto.INT64, [], [target])),
         helper.make_node("Equal", ["input_ids", "t"], ["eq"]),
         helper.make_node("Cast", ["eq"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("ReduceSum", ["f"], ["logits"], keepdims=1, axes=[1])],
        "count_otter",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["b", 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    (tmp_path / "tokenizer.json").write_bytes(TOKENIZER_PATH.read_bytes())
    monkeypatch.setenv("SITUATE_RERANK_ONNX", str(path))
    from workers import rerankers

    rerankers.get.cache_clear()
    scores = rerankers.get("onnx").scores("otter", ["no match here", "otter otter", "one otter"])
    assert scores == [1.0, 3.0, 2.0]  # the query's own "otter" counts once in every pair
    monkeypatch.setenv("SITUATE_RERANK_ONNX", str(tmp_path / "missing.onnx"))
    rerankers.get.cache_clear()
    with pytest.raises(ValueError, match="missing.onnx"):
        rerankers.get("onnx")
    rerankers.get.cache_clear()


# -- situate eval --------------------------------------------------------------------------------

def test_eval_compares_collections_with_a_report(worker, collection_name, tmp_path):
    plain, contextual = collection_name, collection_name + "-kw"
    try:
        _ingest(plain, tmp_path, "--contextualizer", "none")
        _ingest(contextual, tmp_path, "--contextualizer", "keywords")
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
        from workers import collections

        if collections.exists(contextual):
            collections.delete(contextual)


def test_weighted_fusion_keeps_score_gaps():
    from workers.search import fuse

    def hits(*pairs):
        return [{"_id": i, "_score": s, "_source": {"doc_id": i, "chunk": 0, "text": ""}} for i, s in pairs]

    # a leads BM25 by far and is a close third in dense; b is a distant second in BM25, first in dense.
    sides = {"bm25": hits(("a", 30.0), ("b", 2.0), ("c", 1.0)),
             "dense": hits(("b", 0.90), ("c", 0.895), ("a", 0.89), ("d", 0.10))}
    by_rank = [h.doc_id for h in fuse(sides, {"bm25": 1, "dense": 1}, "rrf")]
    by_score = [h.doc_id for h in fuse(sides, {"bm25": 1, "dense": 1}, "weighted")]
    assert by_rank[0] == "b"                  # RRF: ranks 2 and 1 beat ranks 1 and 3
    assert by_score[0] == "a"                 # weighted: a's BM25 lead is huge
    assert np.isclose(fuse(sides, {"bm25": 1, "dense": 0}, "weighted")[0].score, 1.0)


def test_unknown_reranker_is_refused_by_the_cli(worker, collection_name, tmp_path):
    _ingest(collection_name, tmp_path, "--contextualizer", "none")
    bad = run_cli("search", "--collection", collection_name, "--reranker", "magic", "otters")
    assert bad.returncode == 2 and "reranker" in bad.stderr
