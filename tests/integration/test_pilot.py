"""``situate pilot`` as a user runs it on a folder: a sample drawn, indexed plain and with
contexts by the workers, evaluated on labelled questions with intervals, and the whole folder's
bill projected from the sample's."""

from __future__ import annotations

import json

from tests.support import SECRET_KEY, TEST_MODEL, run_cli

TOPICS = {
    "lighthouse": "The keepers trimmed the wick of the lamp every night and logged each passing ship.",
    "customs": "Duties on salt, wine and timber were paid at the customs house before unloading.",
    "shipyard": "The shipyard launched two schooners a year from its slipway near the rope walk.",
    "pilots": "Harbour pilots read the tides from a ledger and boarded ships beyond the bar.",
    "market": "Fishmongers sold herring and cod at the market hall every morning at dawn.",
    "chapel": "Sailors' widows lit candles in the seamen's chapel above the north quay.",
}


def test_pilot_evaluates_a_sample_with_intervals_and_projects_the_folder(worker, standin, collection_name, tmp_path):
    folder = tmp_path / "harbour"
    folder.mkdir()
    for topic, fact in TOPICS.items():
        (folder / f"{topic}.txt").write_text(f"The {topic} of the old harbour.\n\n{fact}\n")
    queries = tmp_path / "queries.jsonl"
    queries.write_text("".join(json.dumps({"query": f"where did the {topic} stand in the old port?",
                                           "gold": [{"doc_id": f"{topic}.txt", "chunk": 0}], "source": "person"}) + "\n"
                               for topic in TOPICS))
    result = run_cli("pilot", str(folder), "--sample", "6", "-c", collection_name, "--contextualizer", "anthropic",
                     "--model", TEST_MODEL, "--queries", str(queries), "--json",
                     # the pilot's own worker situates with the caller's keys: the stand-in's here
                     env={"ANTHROPIC_API_KEY": SECRET_KEY, "ANTHROPIC_BASE_URL": standin.url})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "failed" not in result.stderr, result.stderr
    found = json.loads(result.stdout)
    assert found["collections"] == [f"{collection_name}-plain", collection_name]
    assert (found["documents"], found["questions"]) == (6, 6)
    assert [r["config"].split(":")[0] for r in found["results"]] == ["plain", "contexts"]
    differences = [d for ds in found["differences"].values() for d in ds]
    assert differences, found
    for d in differences:
        assert d["low"] <= d["difference"] <= d["high"]
        assert d["clusters"] == 6  # one question a document: six clusters
    projection = found["projection"]
    assert projection["scale"] == 1.0  # the whole folder was the sample
    assert projection["folder_calls"] == projection["sample_calls"] >= 6  # a call a chunk at least
    assert projection["folder_cost_usd"] > 0
    run_cli("drop", "-c", f"{collection_name}-plain", "--yes")
