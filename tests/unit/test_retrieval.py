"""The read path's pure parts: fusion rules, and the evaluation metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest

from producers.evaluation.evaluate import Gold, LabelledQuery, Retrieved, evaluate, flips, markdown_report
from producers.retrieval.fusion import fuse, rrf
from tests.support import reread_environment


def test_rrf_rewards_agreement():
    def hit(i):
        return {"_id": i, "_source": {"doc_id": i, "chunk": 0, "text": i}}
    fused = rrf({"bm25": [hit("a"), hit("b")], "dense": [hit("d"), hit("b")]})
    assert fused[0].doc_id == "b"  # second on both sides beats first on one
    assert fused[0].score == pytest.approx(2 / 62) and fused[0].ranks == {"bm25": 2, "dense": 2}
    assert {h.doc_id for h in fused[1:]} == {"a", "d"}


def test_weighted_fusion_keeps_score_gaps():
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


def test_onnx_cross_encoder_file(tmp_path, monkeypatch):
    """A tiny cross-encoder built here (the logit counts one token id in the pair) proves the
    path: tokenizer beside the file, pairs in, first output as the score."""
    import onnx  # the [test] extra
    from onnx import TensorProto, helper
    from tokenizers import Tokenizer

    from workers.chunks.splitting import TOKENIZER_PATH

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
    from producers.retrieval import rerankers

    reread_environment()
    rerankers.get.cache_clear()
    scores = rerankers.get("onnx").scores("otter", ["no match here", "otter otter", "one otter"])
    assert scores == [1.0, 3.0, 2.0]  # the query's own "otter" counts once in every pair
    monkeypatch.setenv("SITUATE_RERANK_ONNX", str(tmp_path / "missing.onnx"))
    reread_environment()
    rerankers.get.cache_clear()
    with pytest.raises(ValueError, match="missing.onnx"):
        rerankers.get("onnx")
    rerankers.get.cache_clear()


def test_a_search_never_mixes_two_versions_of_a_document():
    from producers.retrieval.search import newest_only

    def hit(doc, n, seq):
        return {"_id": f"{doc}-{seq}-{n}", "_source": {"doc_id": doc, "chunk": n, "text": "", "seq": seq}}

    sides = {"bm25": [hit("a", 0, 1), hit("a", 1, 2), hit("b", 0, 5)], "dense": [hit("a", 3, 1), hit("b", 1, 5)]}
    kept = newest_only(sides)
    assert [(h["_source"]["doc_id"], h["_source"]["seq"]) for h in kept["bm25"]] == [("a", 2), ("b", 5)]
    assert [(h["_source"]["doc_id"], h["_source"]["seq"]) for h in kept["dense"]] == [("b", 5)]


def test_a_pages_best_chunk_stands_for_it_and_its_others_follow():
    from producers.retrieval.fusion import Hit
    from producers.retrieval.search import distinct_pages

    def hit(doc, chunk, pages):
        return Hit(doc, chunk, 0.0, "", "", pages=pages)
    ranked = [hit("a", 0, [60, 60]), hit("a", 1, [60, 60]), hit("code", 3, None), hit("a", 2, [61, 61]),
              hit("b", 0, [60, 60]), hit("code", 4, None), hit("a", 3, [60, 61])]
    order = [(h.doc_id, h.chunk) for h in distinct_pages(ranked)]
    assert order == [("a", 0), ("code", 3), ("a", 2), ("b", 0), ("code", 4), ("a", 1), ("a", 3)]


def test_eval_reports_each_group_of_queries_apart(tmp_path):
    from producers.evaluation.evaluate import grade_query, group_rows, load_queries, summarize

    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"query": "q1", "gold": [{"doc_id": "a", "page": 1}], "doc_type": "Academic paper"},
        {"query": "q2", "gold": [{"doc_id": "b", "page": 2}], "doc_type": "Guidebook"},
        {"query": "q3", "gold": [{"doc_id": "b", "page": 3}], "doc_type": "Guidebook"}]))
    queries = load_queries(path, "jsonl")
    assert [q.group for q in queries] == ["Academic paper", "Guidebook", "Guidebook"]
    found = {"q1": [Retrieved("a", 0, pages=[1, 1])], "q2": [Retrieved("b", 0, pages=[2, 2])], "q3": []}
    result = summarize("hybrid", [grade_query(q, found[q.query]) for q in queries])
    assert result.hit_at[10] == pytest.approx(200 / 3)
    assert group_rows([result]) == [{"group": "Academic paper", "queries": 1, "hybrid": 100.0},
                                    {"group": "Guidebook", "queries": 2, "hybrid": 50.0}]
    assert result.summary()["groups"]["Guidebook"]["page@10"] == 50.0


def test_label_files_are_read_as_they_are_without_a_format(tmp_path):
    """A cookbook line and an export's line (with its not-relevant marks) in one file; a question
    with only not-relevant marks skipped; a line of neither kind named with both formats' keys."""
    from producers.evaluation.evaluate import load_queries
    from workers.errors import QueryFileError

    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        {"query": "q1", "golden_chunk_uuids": [["a", 0]]},
        {"query": "q2", "gold": [{"doc_id": "b", "text": "words"}], "not_relevant": [{"doc_id": "c", "chunk": 1}]},
        {"query": "q3", "gold": [], "not_relevant": [{"doc_id": "c", "chunk": 2}]}]))
    assert [(q.query, q.gold[0].doc_id) for q in load_queries(path)] == [("q1", "a"), ("q2", "b")]
    path.write_text(json.dumps({"query": "q", "answers": []}))
    with pytest.raises(QueryFileError, match="golden_chunk_uuids") as e:
        load_queries(path)
    assert '"gold"' in str(e.value)


def test_the_knn_query_keeps_more_of_the_graph_in_view_than_it_returns():
    """At ef_search = k (OpenSearch's default) HNSW missed every one of the 20 nearest chunks for
    a FinanceBench question; the query asks for ``EF_SEARCH`` (and never less than k)."""
    from producers.retrieval.search import EF_SEARCH, knn_body

    assert knn_body([0.1] * 4, [], 150)["query"]["knn"]["vector"]["method_parameters"] == {"ef_search": EF_SEARCH}
    assert EF_SEARCH > 150
    assert knn_body([0.1] * 4, [], 2000)["query"]["knn"]["vector"]["method_parameters"]["ef_search"] == 2000



def test_each_side_asks_for_the_candidates_a_query_names():
    """``--candidates`` (CLI) and ``candidates`` (HTTP) reach the search; unset, ``CANDIDATES``."""
    from producers.retrieval.hits import SearchIn
    from producers.retrieval.search import CANDIDATES, SearchOptions
    from workers.storage.catalog import CollectionConfig

    config = CollectionConfig(name="c", dense_weight=1.0, rrf_k=10)
    assert SearchOptions(reranker="none").resolved(config).candidates == CANDIDATES
    assert SearchOptions(reranker="voyage", candidates=30).resolved(config).candidates == 30
    assert SearchIn(query="q", candidates=30).candidates == 30
    with pytest.raises(ValueError):
        SearchIn(query="q", candidates=0)
