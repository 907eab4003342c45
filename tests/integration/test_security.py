"""Closed by default, tried as a stranger would: tokens and their scopes, the refusal to listen
beyond loopback without one, errors that carry no internals, secrets in no log line, the
deployment's allowlist of models, and Redis over TLS with a password."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import httpx
import pytest

from ops.harness import Api, Worker, free_port
from tests.support import run_cli, running_api, wait_until

ADMIN = "admin-token-9c1e-very-secret"


@pytest.fixture(scope="module")
def api():
    with running_api({"SITUATE_API_TOKEN": ADMIN}, secret=ADMIN) as server:
        yield server


PROBES = ("/healthz", "/readyz")  # liveness and readiness: answered without a token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_every_route_refuses_a_request_without_a_valid_token(api, collection_name):
    from producers.web.api import app

    # Every route the app serves, those kept out of the schema too (/metrics, /dashboard/…).
    def served(routes):  # included routers (the dashboard's) are wrapped: walk into them
        for route in routes:
            inner = getattr(route, "original_router", None)
            yield from served(inner.routes) if inner is not None else [route]

    routes = sorted({(method, route.path.replace(":path}", "}")) for route in served(app.routes)
                     for method in getattr(route, "methods", ()) if method != "HEAD" and route.path not in PROBES})
    documented = {(m.upper(), p) for p, ms in
                  httpx.get(f"{api.url}/openapi.json", headers=bearer(ADMIN)).json()["paths"].items() for m in ms}
    assert documented <= set(routes) and len(routes) >= 16
    assert {("GET", "/metrics"), ("GET", "/dashboard"), ("POST", "/dashboard/retry")} <= set(routes)
    for method, path in routes:
        url = api.url + path.replace("{collection}", collection_name).replace("{doc_id}", "a")
        for headers in ({}, bearer("wrong"), {"Authorization": "Basic YWRtaW46YWRtaW4="}):
            r = httpx.request(method, url, headers=headers, json={})
            assert r.status_code == 401, (method, path, headers, r.status_code)
    for probe in PROBES:  # for load balancers and orchestrators, and nothing else: no figure, no name
        reply = httpx.get(f"{api.url}{probe}")
        assert reply.status_code == 200 and set(reply.json()) == {"status"}, reply.text


def test_scoped_tokens_do_what_their_scope_allows_and_no_more(api, worker, collection_name):
    other = collection_name + "-other"
    tokens = {}
    for scope in ("read", "write", "admin"):
        result = run_cli("token", "create", "--collection", collection_name, "--scope", scope, "--name", f"t-{scope}")
        assert result.returncode == 0, result.stderr
        tokens[scope] = result.stdout.strip().splitlines()[-1]
    from workers.connections import redis_client

    stored = json.dumps(redis_client().hgetall("situate:tokens"))
    assert not any(t in stored for t in tokens.values()), "tokens must be stored hashed"
    base = f"{api.url}/v1/collections/{collection_name}"
    doc = {"documents": [{"id": "a", "text": "Sea otters hold hands while they sleep."}]}

    # read: search and status only
    assert httpx.post(f"{base}/documents", json=doc, headers=bearer(tokens["read"])).status_code == 403
    # write: documents, but no collection of its own making
    assert httpx.post(f"{base}/documents", json=doc, headers=bearer(tokens["write"])).status_code == 404
    assert httpx.put(base, json={"contextualizer": "none"}, headers=bearer(tokens["write"])).status_code == 403
    # admin of this collection: creates and configures it; nothing of another collection
    assert httpx.put(base, json={"contextualizer": "none"}, headers=bearer(tokens["admin"])).status_code == 200
    assert httpx.put(f"{api.url}/v1/collections/{other}", json={}, headers=bearer(tokens["admin"])).status_code == 403
    r = httpx.post(f"{base}/documents", json=doc, headers=bearer(tokens["write"]))
    assert r.status_code == 202 and r.json()["documents"][0]["state"] == "queued"
    wait_until(lambda: httpx.get(f"{base}/documents/a", headers=bearer(tokens["read"])).json()["state"] == "indexed",
               60, "document a", step=0.3)
    httpx.post(f"{base}/refresh", headers=bearer(tokens["write"])).raise_for_status()
    hits = httpx.post(f"{base}/search", json={"query": "otters"}, headers=bearer(tokens["read"])).json()["hits"]
    assert hits[0]["doc_id"] == "a"
    assert httpx.delete(f"{base}/documents/a", headers=bearer(tokens["read"])).status_code == 403
    assert httpx.delete(base, headers=bearer(tokens["write"])).status_code == 403
    assert httpx.delete(f"{base}/documents/a", headers=bearer(tokens["write"])).status_code == 200
    # revoked: refused at once
    token_id = next(t["id"] for t in json.loads(run_cli("token", "list", "--json").stdout) if t["name"] == "t-read")
    assert run_cli("token", "revoke", token_id).returncode == 0
    assert httpx.post(f"{base}/search", json={"query": "otters"}, headers=bearer(tokens["read"])).status_code == 401


def test_the_api_refuses_to_listen_beyond_loopback_without_a_token():
    env = {k: v for k, v in os.environ.items() if k != "SITUATE_API_TOKEN"}
    result = run_cli("api", "--host", "0.0.0.0", "--port", str(free_port()), env=env, timeout=60)
    assert result.returncode == 2 and "SITUATE_API_TOKEN" in result.stderr


def test_errors_of_ours_say_nothing_of_our_internals():
    """OpenSearch behind a URL with credentials, and down: the caller gets 500 and an id; the
    log has the rest, without the password."""
    api = Api(env={"SITUATE_API_TOKEN": ADMIN, "SITUATE_OPENSEARCH_URL": f"http://elastic:hunter2pass@127.0.0.1:{free_port()}"})
    try:
        from workers import lifecycle

        lifecycle.ensure("t-internals", contextualizer="none")
        r = httpx.post(f"{api.url}/v1/collections/t-internals/search", json={"query": "x"}, headers=bearer(ADMIN),
                       timeout=120)
        assert r.status_code == 500 and set(r.json()) == {"detail", "error_id"}
        assert "hunter2pass" not in r.text and "127.0.0.1" not in r.text
    finally:
        api.stop()
        from workers import lifecycle

        lifecycle.delete("t-internals")
    assert r.json()["error_id"] in api.output() and "hunter2pass" not in api.output()


def test_collections_may_use_only_the_models_the_deployment_allows(collection_name, tmp_path):
    env = {"SITUATE_ALLOWED_MODELS": "none,keywords,anthropic:claude-haiku-5-5"}
    (tmp_path / "a.txt").write_text("hello")
    refused = run_cli("ingest", "-c", collection_name, "--contextualizer", "anthropic", "--model", "claude-opus-5-5",
                      str(tmp_path), env=env)
    assert refused.returncode == 2 and "not allowed" in refused.stderr
    refused = run_cli("ingest", "-c", collection_name, "--contextualizer", "structural", str(tmp_path), env=env)
    assert refused.returncode == 2 and "SITUATE_ALLOWED_MODELS" in refused.stderr.replace("\n", " ")


@pytest.mark.skipif(not shutil.which("openssl"), reason="needs the openssl command to make a CA")
def test_redis_over_tls_with_a_password(tmp_path, collection_name):
    """The whole path — producer, broker, worker, document state — over rediss:// with a CA of
    our own and a password, which appears in no log line."""
    def run(*args):
        subprocess.run(args, cwd=tmp_path, check=True, capture_output=True)

    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
        "-days", "2", "-subj", "/CN=situate-test-ca")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "redis.key", "-out", "redis.csr",
        "-subj", "/CN=127.0.0.1")
    (tmp_path / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", "redis.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "redis.crt", "-days", "2", "-extfile", "ext")
    port, password = free_port(), "tls-redis-pass-4b7"
    server = subprocess.Popen(["redis-server", "--port", "0", "--tls-port", str(port), "--tls-cert-file", "redis.crt",
                               "--tls-key-file", "redis.key", "--tls-ca-cert-file", "ca.crt", "--tls-auth-clients", "no",
                               "--requirepass", password, "--save", "", "--appendonly", "no"],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = {"SITUATE_REDIS_URL": f"rediss://:{password}@127.0.0.1:{port}/0", "SITUATE_REDIS_CA_CERTS": str(tmp_path / "ca.crt")}
    worker = None
    try:
        time.sleep(0.5)
        worker = Worker(1, env=env, name="tls-worker")
        path = tmp_path / "d.jsonl"
        path.write_text(json.dumps({"id": "tls", "text": "Encrypted otters float in the kelp."}) + "\n")
        result = run_cli("ingest", "-c", collection_name, "--contextualizer", "none", str(path), "--json", env=env,
                         timeout=180)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["indexed"] == 1
        assert password not in result.stdout + result.stderr
        assert password not in worker.log.read_text()
        run_cli("drop", "-c", collection_name, "--yes", env=env)
    finally:
        if worker:
            worker.stop()
        server.terminate()
        server.wait(timeout=10)


def test_amazon_opensearch_requests_are_signed_with_sigv4(monkeypatch):
    """SITUATE_OPENSEARCH_AUTH=sigv4: every request to the node carries an AWS4 signature made
    from boto3's credentials (checked against a local server that records what it gets)."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen: list[dict] = []

    class Recorder(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(dict(self.headers))
            body = json.dumps({"version": {"number": "2.19.1", "distribution": "opensearch"}}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    from workers import connections, settings

    monkeypatch.setenv("SITUATE_OPENSEARCH_URL", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.setenv("SITUATE_OPENSEARCH_AUTH", "sigv4")
    monkeypatch.setenv("SITUATE_OPENSEARCH_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASIGV4TEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sigv4-secret-for-tests")
    settings.get_settings.cache_clear()
    try:
        from opensearchpy import OpenSearch

        OpenSearch(**connections.opensearch_options()).info()
    finally:
        settings.get_settings.cache_clear()
        server.shutdown()
    auth = seen[0].get("Authorization", "")
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIASIGV4TEST/") and "/eu-west-3/es/aws4_request" in auth
    assert "X-Amz-Date" in seen[0] and "sigv4-secret-for-tests" not in json.dumps(seen)
