"""The HTTP API and the Python client, against a real uvicorn process and real workers."""

from __future__ import annotations

import httpx
import pytest

from ops.harness import Api
from situate import SituateClient, SituateError

TOKEN = "test-token-7f3a"


@pytest.fixture(scope="module")
def api_url():
    api = Api(env={"SITUATE_API_TOKEN": TOKEN})
    yield api.url
    api.stop()
    assert TOKEN not in api.output(), "the API token leaked into the server's log"


def test_readiness_names_the_store_that_is_away():
    api = Api(env={"SITUATE_API_TOKEN": TOKEN, "SITUATE_OPENSEARCH_URL": "http://127.0.0.1:9"})  # nothing listens
    try:
        assert httpx.get(f"{api.url}/healthz").status_code == 200  # alive: nothing to restart
        reply = httpx.get(f"{api.url}/readyz", timeout=60)
        assert reply.status_code == 503 and set(reply.json()["down"]) == {"opensearch"}
    finally:
        api.stop()


def test_auth_required_except_healthz(api_url, collection_name):
    assert httpx.get(f"{api_url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{api_url}/readyz").json() == {"status": "ready"}
    r = httpx.post(f"{api_url}/v1/collections/{collection_name}/search", json={"query": "x"})
    assert r.status_code == 401
    r = httpx.get(f"{api_url}/v1/collections/{collection_name}/documents/a",
                  headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    assert httpx.get(f"{api_url}/openapi.json").status_code == 401
    schema = httpx.get(f"{api_url}/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert "/v1/collections/{collection}/search" in schema["paths"]
    assert "DocumentIn" in str(schema["paths"]["/v1/collections/{collection}/documents"]["post"]["requestBody"])


def test_submit_batch_state_and_search(worker, api_url, collection_name):
    with SituateClient(api_url, token=TOKEN) as client:
        results = client.add_documents(collection_name, [
            {"id": "otters", "text": "# Sea otters\n\nSea otters hold hands while sleeping so they do not drift apart.",
             "metadata": {"topic": "animals", "lang": "en"}},
            {"id": "kernel", "text": "The Linux kernel scheduler balances runnable tasks across CPU cores.",
             "metadata": {"topic": "computing"}},
            {"id": "blank", "text": "  "},
            {"id": "given", "text": "alpha beta. gamma delta.", "chunks": ["alpha beta.", "gamma delta."],
             "metadata": {"topic": "letters"}},
        ])
        by_id = {r["doc_id"]: r for r in results}
        assert by_id["blank"]["state"] == "failed" and "empty" in by_id["blank"]["error"]
        assert {by_id[d]["state"] for d in ("otters", "kernel", "given")} == {"queued"}

        states = client.wait(collection_name, ["otters", "kernel", "given"], timeout=300)
        assert len(states) == 3 and all(s["state"] == "indexed" for s in states.values()), states
        assert states["given"]["chunks"] == 2
        doc = client.get_document(collection_name, "otters")
        assert doc["chunks"] >= 1 and doc["error"] is None
        assert client.get_document(collection_name, "blank")["state"] == "failed"

        hits = client.search(collection_name, "why do otters hold hands", k=3)
        assert hits[0]["doc_id"] == "otters"
        assert set(hits[0]) == {"doc_id", "chunk", "score", "text", "context", "metadata", "title", "pages", "section"}
        assert hits[0]["pages"] is None and hits[0]["section"] == "Sea otters"  # text has no pages
        assert hits[0]["context"].startswith("Sea otters")  # structural context: the heading
        assert hits[0]["metadata"] == {"topic": "animals", "lang": "en"}

        filtered = client.search(collection_name, "why do otters hold hands", k=3, filters={"topic": "computing"})
        assert [h["doc_id"] for h in filtered] == ["kernel"]
        given = client.search(collection_name, "gamma", k=5, filters={"doc_id": "given"})
        assert sorted(h["text"] for h in given) == ["alpha beta.", "gamma delta."]

        with pytest.raises(SituateError, match="404"):
            client.get_document(collection_name, "nope")


def test_collection_settings_are_frozen(api_url, collection_name):
    with SituateClient(api_url, token=TOKEN) as client:
        created = client.create_collection(collection_name, contextualizer="none", language="french")
        assert created["language"] == "french"
        with pytest.raises(SituateError, match="409"):
            client.create_collection(collection_name, language="german")
        with pytest.raises(SituateError, match="422"):
            client.create_collection(collection_name + "x", embedder="no-such-embedder")
