"""The API as a stranger would probe it at the HTTP level: one framing, a size limit that holds
for chunked bodies as bytes arrive, nothing heavy before the token is checked, nesting bounded,
metric labels from a fixed set, and open mode (no credential at all) for this machine only.

Raw sockets where an HTTP client would refuse to send what is being tested (both length headers,
64 MB of chunks); the API's memory read from /proc while it answers."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from ops.harness import Api, RedisServer
from tests.support import run_cli, running_api, use_services, wait_until

ADMIN = "framing-admin-token-3f9a"
LIMIT = 8_000_000  # SITUATE_MAX_REQUEST_BYTES for these runs: small, so memory growth is readable


@pytest.fixture(scope="module")
def api():
    with running_api({"SITUATE_API_TOKEN": ADMIN, "SITUATE_MAX_REQUEST_BYTES": str(LIMIT)}, secret=ADMIN) as server:
        yield server


def peak_rss_kb(api) -> int:
    """The API process's high-water resident memory (VmHWM): what a request made it hold at worst."""
    from pathlib import Path

    for line in Path(f"/proc/{api.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def raw_request(api, head: str, body_chunks=(), timeout: float = 60) -> tuple[int, bytes]:
    """Send ``head`` (request line and headers) and the body pieces from a thread, read the
    answer here: the status and what came back. The server may answer and close before it has
    read everything (that is the point): the sender then stops."""
    sock = socket.create_connection(("127.0.0.1", api.port), timeout=timeout)

    def sender() -> None:
        try:
            sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
            for piece in body_chunks:
                sock.sendall(piece)
        except OSError:  # answered and closed
            pass

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    reply = b""
    try:
        while b"\r\n\r\n" not in reply:
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    except OSError:
        pass
    finally:
        sock.close()
        thread.join(timeout=timeout)
    return (int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0), reply


def chunked(total: int, piece: int = 1 << 16):
    """``total`` bytes of a JSON-ish body, as HTTP/1.1 chunks, then the last chunk."""
    block = b"[" + b"1," * (piece // 2 - 1) + b"1"
    sent = 0
    while sent < total:
        yield f"{len(block):x}\r\n".encode() + block + b"\r\n"
        sent += len(block)
    yield b"0\r\n\r\n"


def test_both_length_headers_at_once_are_refused(api):
    status, _ = raw_request(api, "POST /v1/collections/framing/search HTTP/1.1\nHost: 127.0.0.1\n"
                                 f"Authorization: Bearer {ADMIN}\nContent-Type: application/json\n"
                                 "Content-Length: 2\nTransfer-Encoding: chunked\n", [b"2\r\n{}\r\n0\r\n\r\n"])
    assert status == 400
    status, _ = raw_request(api, "POST /v1/collections/framing/search HTTP/1.1\nHost: 127.0.0.1\n"
                                 "Content-Length: 2, 3\n", [b"{}"])
    assert status == 400


def test_a_chunked_body_is_refused_as_it_passes_the_limit_and_a_strangers_is_not_read(api):
    """64 MB of chunks: without a token, refused before a byte of the body is held; with one,
    refused (413) once it passes the limit, having held no more than the limit."""
    before = peak_rss_kb(api)
    status, _ = raw_request(api, "POST /v1/collections/framing/search HTTP/1.1\nHost: 127.0.0.1\n"
                                 "Content-Type: application/json\nTransfer-Encoding: chunked\n", chunked(64 << 20))
    stranger_growth = (peak_rss_kb(api) - before) * 1024
    assert status == 401
    assert stranger_growth < LIMIT / 4, f"a stranger's chunked body grew the API by {stranger_growth:,} bytes"

    # The authorized path's own first-time costs (what it imports and allocates once) are not the
    # body's: paid with a small body first, so the growth measured next is what the body held.
    raw_request(api, "POST /v1/collections/framing/search HTTP/1.1\nHost: 127.0.0.1\n"
                     f"Authorization: Bearer {ADMIN}\nContent-Type: application/json\n"
                     "Transfer-Encoding: chunked\n", chunked(1 << 16))
    before = peak_rss_kb(api)
    status, _ = raw_request(api, "POST /v1/collections/framing/search HTTP/1.1\nHost: 127.0.0.1\n"
                                 f"Authorization: Bearer {ADMIN}\nContent-Type: application/json\n"
                                 "Transfer-Encoding: chunked\n", chunked(64 << 20))
    growth = (peak_rss_kb(api) - before) * 1024
    assert status == 413
    # The body up to the limit is all it held: one buffer, which CPython grows by an eighth at a
    # time (so up to 9/8 of the limit), plus what the server holds before handing it on (uvloop
    # reads 256 kB at a time, uvicorn's httptools protocol joins a read's chunks into new bytes
    # before it pauses) and the allocator's rounding: 2 MB.
    # Reading the whole body would have grown it by 64 MB or more.
    assert growth < LIMIT * 9 / 8 + 2_000_000, f"a 64 MB chunked body grew the API by {growth:,} bytes"
    print(f"\n[framing] peak memory growth: stranger's 64 MB chunked {stranger_growth / 1e6:.1f} MB, "
          f"with a token {growth / 1e6:.1f} MB (limit {LIMIT / 1e6:.0f} MB)")


def test_healthz_answers_while_strangers_upload_32_mb():
    """A 32 MB sign-in form (its length declared, within the default request limit) and 32 MB
    of chunked JSON, both without a token: neither holds the event loop (the form is capped at a
    few kB, the JSON is never read)."""
    api = Api(env={"SITUATE_API_TOKEN": ADMIN})  # the default limit, 32 MB
    form = b"token=x" + b"&a=%41" * (32_000_000 // 6 - 10)  # five million fields: slow to parse

    def upload_form() -> None:
        raw_request(api, "POST /dashboard/login HTTP/1.1\nHost: 127.0.0.1\n"
                         f"Content-Type: application/x-www-form-urlencoded\nContent-Length: {len(form)}\n",
                    [form[i:i + (1 << 20)] for i in range(0, len(form), 1 << 20)])

    def upload_json() -> None:
        raw_request(api, "POST /v1/collections/framing/documents HTTP/1.1\nHost: 127.0.0.1\n"
                         "Content-Type: application/json\nTransfer-Encoding: chunked\n", chunked(32 << 20))

    try:
        slowest = 0.0
        with httpx.Client(base_url=api.url) as client:
            for _ in range(3):
                uploads = [threading.Thread(target=upload_form), threading.Thread(target=upload_json)]
                for t in uploads:
                    t.start()
                while any(t.is_alive() for t in uploads):
                    started = time.perf_counter()
                    assert client.get("/healthz").status_code == 200
                    slowest = max(slowest, time.perf_counter() - started)
                    time.sleep(0.02)
                for t in uploads:
                    t.join()
        assert slowest < 0.5, f"/healthz took {slowest:.2f} s during the uploads"
        print(f"\n[framing] slowest /healthz while strangers upload 32 MB: {slowest * 1000:.0f} ms")
        status, _ = raw_request(api, "POST /dashboard/login HTTP/1.1\nHost: 127.0.0.1\n"
                                     f"Content-Type: application/x-www-form-urlencoded\nContent-Length: {len(form)}\n",
                                [form[:1 << 20]])
        assert status == 413
    finally:
        api.stop()


def test_deeply_nested_json_is_a_4xx_and_json_routes_take_json_only(api):
    headers = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
    deep = b"[" * 100_000 + b"]" * 100_000
    for route in ("search", "documents"):
        r = httpx.post(f"{api.url}/v1/collections/framing/{route}", content=deep, headers=headers)
        assert r.status_code == 400 and "nested" in r.json()["detail"], (route, r.status_code, r.text[:200])
    r = httpx.put(f"{api.url}/v1/collections/framing", content=b'{"contextualizer": "none"}',
                  headers={**headers, "Content-Type": "text/plain"})
    assert r.status_code == 415


def test_metric_labels_come_from_a_fixed_set(api):
    """A method the HTTP parser knows but the API does not serve (WebDAV's) is counted as
    "other"; one no parser knows is refused before the app (httptools: 400) or counted so too."""
    with httpx.Client(base_url=api.url) as client:
        for method in ("PROPFIND", "PURGE", "MX1", "BREW"):
            client.request(method, "/healthz")
        text = client.get("/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
    assert not any(f'method="{m}"' in text for m in ("PROPFIND", "PURGE", "MX1", "BREW"))
    assert 'method="other"' in text


def test_open_mode_answers_this_machine_only_and_no_browser_form(tmp_path, collection_name):
    """No admin token, no token issued (a Redis of its own, so no other test's token counts):
    a DNS-rebinding Host is refused, and so is a text/plain body, the one a cross-site form can
    send without asking; JSON from this machine works."""
    redis = RedisServer(tmp_path / "redis")
    try:
        with use_services(redis_url=redis.url()):
            server = Api(env={"SITUATE_REDIS_URL": redis.url(), "SITUATE_API_TOKEN": ""})
            try:
                base = f"{server.url}/v1/collections/{collection_name}"
                assert httpx.put(base, json={"contextualizer": "none"}).status_code == 200
                rebound = httpx.get(f"{base}", headers={"Host": "attacker.example"})
                assert rebound.status_code == 421
                assert httpx.get(f"{base}", headers={"Host": "localhost:8000"}).status_code == 200
                assert httpx.get(f"{base}", headers={"Host": "[::1]:8000"}).status_code == 200
                form = httpx.post(f"{base}/documents", content=b'{"id": "x", "text": "from another site"}',
                                  headers={"Content-Type": "text/plain"})
                assert form.status_code == 415
                ok = httpx.post(f"{base}/documents", json={"id": "x", "text": "from this machine"})
                assert ok.status_code == 202
            finally:
                server.stop()
                from workers import lifecycle

                lifecycle.delete(collection_name)
    finally:
        redis.stop()


def test_open_mode_takes_no_write_from_another_site_and_never_reopens(tmp_path, collection_name):
    """Open mode took cross-site writes that need no preflight: a multipart or ``text/plain``
    upload, and the bodiless POSTs (``refresh``, ``reindex/finish``). And it was decided again
    every 5 s, so revoking the last token (a collection's drop does) opened a closed API."""
    redis = RedisServer(tmp_path / "redis")
    try:
        with use_services(redis_url=redis.url()):
            server = Api(env={"SITUATE_REDIS_URL": redis.url(), "SITUATE_API_TOKEN": ""})
            try:
                base = f"{server.url}/v1/collections/{collection_name}"
                assert httpx.put(base, json={"contextualizer": "none"}).status_code == 200
                evil = {"Origin": "https://evil.example"}
                cross = {"Sec-Fetch-Site": "cross-site"}
                refused = {
                    "text/plain upload": httpx.post(f"{base}/files", params={"id": "a.txt"}, content=b"pwned",
                                                    headers={"Content-Type": "text/plain", **evil}),
                    "multipart upload": httpx.post(f"{base}/files", files={"file": ("a.txt", b"pwned")}, headers=cross),
                    "refresh": httpx.post(f"{base}/refresh", headers=evil),
                    "reindex finish": httpx.post(f"{base}/reindex/finish", headers={**evil, **cross}),
                    "a null origin": httpx.post(f"{base}/refresh", headers={"Origin": "null"}),
                    "delete": httpx.delete(f"{base}/documents/a.txt", headers=cross),
                }
                for what, response in refused.items():
                    assert response.status_code == 403, (what, response.status_code)
                assert httpx.get(f"{base}/documents/a.txt").status_code == 404  # nothing was written
                same = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
                assert httpx.post(f"{base}/refresh", headers=same).status_code == 200
                assert httpx.post(f"{base}/files", params={"id": "b.txt"}, content=b"from curl",
                                  headers={"Content-Type": "text/plain"}).status_code == 202  # no browser: served
                from producers.web import auth

                token, token_id = auth.create_token("*", "read", "closes-it")
                wait_until(lambda: httpx.get(base).status_code == 401, 30, "the API to close once a token exists")
                assert run_cli("token", "revoke", token_id, env={"SITUATE_REDIS_URL": redis.url()}).returncode == 0
                time.sleep(6)  # past the open-mode recheck
                assert httpx.get(base).status_code == 401  # closed for good
            finally:
                server.stop()
                from workers import lifecycle

                lifecycle.delete(collection_name)
    finally:
        redis.stop()
