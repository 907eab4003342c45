"""The search page in a real headless Chromium, signed in with a collection's read token, over
public FinanceBench filings ingested as a user would: hits show their context apart from their
text, the cited page loads as an image with the chunk marked on it, another collection's name
never appears, and revoking the token ends the session. Around it, the routes without a browser:
who may see a page image or an original, the CSRF rule, what the page says when an original was
not kept, and the MCP ``read`` tool's page image."""

from __future__ import annotations

import base64
import io
import json
import shutil
import uuid

import httpx
import numpy as np
import pytest

from tests.integration.test_operations import CHROMIUM
from tests.support import SHARED, run_cli, running_api

ADMIN = "search-page-admin-7f3a"
FILINGS = ("ULTABEAUTY_2023Q4_EARNINGS.pdf", "AMCOR_2022_8K_dated-2022-07-01.pdf")
QUERY = "Ulta Beauty net sales fourth quarter fiscal 2023"
MARK = np.array([255, 214, 0])  # workers/extraction/render.py's highlighter, before it is blended


@pytest.fixture(scope="module")
def api():
    with running_api({"SITUATE_API_TOKEN": ADMIN}, secret=ADMIN) as server:
        yield server


@pytest.fixture(scope="module")
def filings(worker, tmp_path_factory):
    """Two filings in one collection, and another tenant's collection beside it."""
    from workers import lifecycle

    folder = tmp_path_factory.mktemp("filings")
    for name in FILINGS:
        shutil.copy(SHARED / "data" / "financebench" / "pdfs" / name, folder / name)
    ours, theirs = f"t-filings-{uuid.uuid4().hex[:6]}", f"t-secret-neighbour-{uuid.uuid4().hex[:6]}"
    result = run_cli("ingest", "-c", ours, "--contextualizer", "keywords", "--language", "english", str(folder), "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["indexed"] == len(FILINGS), result.stdout + result.stderr
    other = folder / "other"
    other.mkdir()
    (other / "note.md").write_text("# Ulta Beauty notes\n\nNet sales of the fourth quarter, a neighbour's copy.\n")
    assert run_cli("ingest", "-c", theirs, "--contextualizer", "none", str(other)).returncode == 0
    yield ours, theirs
    lifecycle.delete(ours)
    lifecycle.delete(theirs)


def token(collection: str, scope: str = "read") -> str:
    result = run_cli("token", "create", "--collection", collection, "--scope", scope)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def signed_in(api, secret: str) -> httpx.Client:
    client = httpx.Client(base_url=api.url, follow_redirects=False, timeout=60)
    r = client.post("/signin", data={"token": secret, "next": "/search"})
    assert r.status_code == 303 and r.headers["location"] == "/search", r.text
    return client


def marked_pixels(png: bytes) -> int:
    """Pixels the highlighter coloured: yellow over white paper, or over black print."""
    from PIL import Image

    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    return int(((r > 200) & (g > 200) & (b < 150) | (r > 90) & (g > 70) & (b < 20) & (r > b + 60)).sum())


def test_the_search_page_in_a_real_browser_with_a_collection_token(api, filings, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    assert CHROMIUM, "no chromium: ops/test installs Debian's package (apt-get install chromium)"
    ours, theirs = filings
    secret = token(ours)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        problems: list[str] = []
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on("response", lambda r: problems.append(f"{r.status} {r.url}") if r.status >= 400 and
                r.request.resource_type == "image" and not r.url.endswith("/favicon.ico") else None)
        page.goto(f"{api.url}/search")
        assert "Sign in" in page.content()
        page.fill("#token", secret)
        page.click("button[type=submit]")
        page.wait_for_url(f"{api.url}/search")
        cookie = next(c for c in page.context.cookies() if c["name"] == "situate_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert page.locator("select[name=collection] option").all_text_contents() == [ours]

        page.fill("input[name=q]", QUERY)
        page.click("form.query button[type=submit]")
        page.wait_for_selector("article.hit")
        assert "q=Ulta+Beauty" in page.url  # the URL holds the search: shared, reloaded
        first = page.locator("article.hit").first
        assert first.locator(".context .label").text_content() == "Context situate added"
        assert first.locator(".text .label").text_content() == "Chunk text"
        context = first.locator(".context").text_content().removeprefix("Context situate added")
        text = first.locator(".text").text_content()
        assert "Ulta Beauty" in context and context.strip() not in text  # apart: the context is not the text
        assert first.locator(".text mark").count() >= 1  # the query's words, marked
        assert "ULTABEAUTY_2023Q4_EARNINGS.pdf p. " in first.locator(".where").inner_text()

        image = first.locator("figure img")
        expect(image).to_be_visible()
        image.scroll_into_view_if_needed()
        page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=image.element_handle(), timeout=30_000)
        src = image.get_attribute("src")
        drawn = page.request.get(f"{api.url}{src}")
        assert drawn.status == 200 and drawn.headers["content-type"] == "image/png"
        assert int(drawn.headers["x-marked-lines"]) >= 1 and marked_pixels(drawn.body()) > 500
        link = first.locator("figcaption a").get_attribute("href")
        assert link.startswith("/search/original?") and "#page=" in link
        assert page.request.get(f"{api.url}{link.split('#')[0]}").body()[:5] == b"%PDF-"

        shot = tmp_path / "search-page.png"
        page.screenshot(path=str(shot), full_page=False)
        print(f"screenshot: {shot}")
        for view in (page.content(), page.request.get(f"{api.url}/search?collection={theirs}&q=net+sales").text()):
            assert theirs not in view  # another collection: never named, not even refused by name
        assert page.request.get(f"{api.url}/search?collection={theirs}&q=net+sales").status == 403
        assert page.request.get(f"{api.url}{src.replace(ours, theirs)}").status == 403

        assert run_cli("token", "revoke", secret).returncode == 0
        page.reload()
        assert "Sign in" in page.content() and "article" not in page.content()
        assert problems == [], problems
        browser.close()


def test_page_routes_need_a_session_a_reader_and_the_csrf_token(api, filings):
    ours, _ = filings
    for path in ("/search/page.png?collection=x&doc_id=y&chunk=0", f"/search/original?collection={ours}&doc_id=y"):
        assert httpx.get(f"{api.url}{path}").status_code == 401
    assert httpx.get(f"{api.url}/search").status_code == 401  # the sign-in form
    client = signed_in(api, token(ours))
    assert client.post("/signout").status_code == 403  # the cookie alone: another site's form
    assert client.get("/dashboard/data").status_code == 403  # the fleet views stay '*'-only
    page = client.get("/search", params={"collection": ours, "q": "x" * 5000})
    assert page.status_code == 422 and "4096" in page.text  # the API's limits
    page = client.get("/search", params={"collection": ours, "q": QUERY, "k": 3, "mode": "bm25"})
    assert page.status_code == 200 and page.text.count('<article class="hit') == 3
    csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
    assert client.post("/signout", data={"csrf": csrf}).status_code == 303
    assert client.get("/search").status_code == 401


def test_an_original_not_kept_is_said_on_the_page(api, filings):
    """Past the budget (or with SITUATE_KEEP_ORIGINALS off) the page says why it shows no page."""
    from workers.storage import states
    from workers.storage.bodies import body_store

    ours, _ = filings
    doc = FILINGS[1]
    assert states.get(ours, doc)["original"] == "kept"
    assert body_store().keep_original(ours, "nothing-to-keep", "v1", budget=1) is False
    states.annotate(ours, doc, original="not kept: over the 1 MB kept for originals (SITUATE_KEEP_ORIGINALS_MB)")
    client = signed_in(api, ADMIN)
    page = client.get("/search", params={"collection": ours, "q": "Amcor Bemis 8-K", "k": 20}).text
    assert "its original is not kept: over the 1 MB" in page
    states.annotate(ours, doc, original="kept")


def test_an_agent_reads_the_page_image_over_mcp(api, filings):
    import asyncio

    from tests.integration.test_agents import _http, _mcp_session

    ours, _ = filings
    hit = httpx.post(f"{api.url}/v1/collections/{ours}/search", json={"query": QUERY, "k": 1},
                     headers={"Authorization": f"Bearer {ADMIN}"}).json()["hits"][0]

    async def read(client):
        return await client.call_tool("read", {"collection": ours, "doc_id": hit["doc_id"], "chunk": hit["chunk"],
                                               "around": 0, "page_image": True})
    result = asyncio.run(_mcp_session(_http(api, token(ours)), read))
    assert not result.is_error and result.structured_content["chunks"][0]["chunk"] == hit["chunk"]
    images = [c for c in result.content if c.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    assert marked_pixels(base64.b64decode(images[0].data)) > 500


def test_a_delete_and_a_drop_remove_kept_originals_within_their_budget(worker, tmp_path):
    from tests.documents import make
    from workers import keys, lifecycle
    from workers.connections import redis_client
    from workers.storage.bodies import body_store

    name = f"t-originals-{uuid.uuid4().hex[:6]}"
    folder = tmp_path / "pdfs"
    folder.mkdir()
    for i in range(2):
        (folder / f"memo-{i}.pdf").write_bytes(make.pdf([[f"Memo {i} about kelp farms", "Page one of the memo."]]))
    used = int(redis_client().get(keys.ORIGINALS_BYTES) or 0)
    assert run_cli("ingest", "-c", name, "--contextualizer", "none", str(folder)).returncode == 0
    sizes = [len((folder / f"memo-{i}.pdf").read_bytes()) for i in range(2)]
    assert [body_store().kept_original(name, f"memo-{i}.pdf")[1][:5] for i in range(2)] == [b"%PDF-"] * 2
    assert int(redis_client().get(keys.ORIGINALS_BYTES)) - used == sum(sizes)  # counted against the budget
    assert run_cli("delete", "-c", name, "memo-0.pdf").returncode == 0
    assert body_store().kept_original(name, "memo-0.pdf") is None
    assert int(redis_client().get(keys.ORIGINALS_BYTES)) - used == sizes[1]
    lifecycle.delete(name)
    assert body_store().kept_original(name, "memo-1.pdf") is None
    assert int(redis_client().get(keys.ORIGINALS_BYTES) or 0) == used
