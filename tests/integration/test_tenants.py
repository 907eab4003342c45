"""Several tenants on one deployment: a collection's token sees nothing of the fleet, a session
ends with its token, tokens die with their collection's generation, and what a caller may make
the deployment pay for is the operator's choice (rerankers and embedders included)."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.support import run_cli, running_api

ADMIN = "tenants-admin-token-71c2"


@pytest.fixture(scope="module")
def api():
    # The deployment's default allowlists (the test session allows everything: "*").
    with running_api({"SITUATE_API_TOKEN": ADMIN, "SITUATE_ALLOWED_RERANKERS": "none,onnx",
                      "SITUATE_ALLOWED_EMBEDDERS": "local-e5,local-bge,local,local-multilingual"}, secret=ADMIN) as server:
        yield server


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def token(collection: str, scope: str) -> str:
    result = run_cli("token", "create", "--collection", collection, "--scope", scope)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def sign_in(api, secret: str) -> httpx.Client:
    client = httpx.Client(base_url=api.url, follow_redirects=False)
    r = client.post("/dashboard/login", data={"token": secret})
    client.signed_in = r.status_code == 303 and "situate_session" in client.cookies
    return client


def test_a_collection_token_sees_no_fleet_view(api, collection_name):
    httpx.put(f"{api.url}/v1/collections/{collection_name}", json={"contextualizer": "none"},
              headers=bearer(ADMIN)).raise_for_status()
    scoped = token(collection_name, "read")
    assert httpx.get(f"{api.url}/v1/collections/{collection_name}", headers=bearer(scoped)).status_code == 200
    assert httpx.get(f"{api.url}/metrics", headers=bearer(scoped)).status_code == 403
    client = sign_in(api, scoped)  # a session for its search page, not for the fleet's
    assert client.signed_in and client.get("/search").status_code == 200
    assert client.get("/dashboard/data").status_code == 403
    assert client.get("/dashboard").status_code == 403
    # A token on every collection reads them.
    fleet = token("*", "read")
    assert httpx.get(f"{api.url}/metrics", headers=bearer(fleet)).status_code == 200
    assert sign_in(api, fleet).get("/dashboard/data").status_code == 200


def test_revoking_a_token_ends_its_dashboard_sessions(api):
    secret = token("*", "write")
    client = sign_in(api, secret)
    assert client.signed_in and client.get("/dashboard/data").status_code == 200
    csrf = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/dashboard").text)
    assert csrf
    assert run_cli("token", "revoke", secret).returncode == 0
    assert client.get("/dashboard/data").status_code == 401
    headers = {"X-CSRF-Token": csrf.group(1), "Content-Type": "application/json"}
    assert client.post("/dashboard/retry", content=json.dumps({"collection": "x"}), headers=headers).status_code == 401
    page = client.get("/dashboard")
    assert page.status_code == 401 and "Sign in" in page.text


def test_a_collection_dropped_and_made_again_does_not_open_to_the_old_tenant(api, collection_name):
    base = f"{api.url}/v1/collections/{collection_name}"
    httpx.put(base, json={"contextualizer": "none"}, headers=bearer(ADMIN)).raise_for_status()
    tenant = token(collection_name, "admin")
    assert httpx.get(base, headers=bearer(tenant)).status_code == 200
    assert httpx.delete(base, headers=bearer(ADMIN)).status_code == 200
    httpx.put(base, json={"contextualizer": "none"}, headers=bearer(ADMIN)).raise_for_status()  # a new tenant's
    assert httpx.get(base, headers=bearer(tenant)).status_code == 401
    listed = json.loads(run_cli("token", "list", "--json").stdout)
    assert not any(t["collection"] == collection_name for t in listed), "the drop revokes its tokens"


def test_a_token_made_before_its_collection_is_revoked_by_the_drop(api, collection_name):
    base = f"{api.url}/v1/collections/{collection_name}"
    early = token(collection_name, "admin")  # no collection yet: no generation to bind to
    assert httpx.put(base, json={"contextualizer": "none"}, headers=bearer(early)).status_code == 200
    assert httpx.delete(base, headers=bearer(ADMIN)).status_code == 200
    httpx.put(base, json={"contextualizer": "none"}, headers=bearer(ADMIN)).raise_for_status()
    assert httpx.get(base, headers=bearer(early)).status_code == 401


def test_paid_rerankers_and_embedders_are_the_operators_choice(api, collection_name):
    base = f"{api.url}/v1/collections/{collection_name}"
    refused = httpx.put(base, json={"contextualizer": "none", "embedder": "voyage"}, headers=bearer(ADMIN))
    assert refused.status_code == 403 and "SITUATE_ALLOWED_EMBEDDERS" in refused.json()["detail"]
    httpx.put(base, json={"contextualizer": "none"}, headers=bearer(ADMIN)).raise_for_status()
    reader = token(collection_name, "read")
    r = httpx.post(f"{base}/search", json={"query": "otters", "reranker": "voyage"}, headers=bearer(reader))
    assert r.status_code == 403 and "SITUATE_ALLOWED_RERANKERS" in r.json()["detail"]
    assert httpx.post(f"{base}/search", json={"query": "otters", "reranker": "none"},
                      headers=bearer(reader)).status_code == 200
    # A reranker stored as the collection's default is checked when it is set, too.
    other = collection_name + "-r"
    stored = httpx.put(f"{api.url}/v1/collections/{other}", json={"contextualizer": "none", "reranker": "cohere"},
                       headers=bearer(ADMIN))
    assert stored.status_code == 403
