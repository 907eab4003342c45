"""Documents as users have them, through the real pipeline: a folder of PDF, Word, PowerPoint,
Excel, CSV, HTML and Markdown files is ingested, extracted by the workers (in their sandbox),
chunked by layout and indexed with citations; hits say which page and section; hostile files
fail alone, with their reasons, and the worker lives on; files come in through the API as
uploads (multipart or a raw body) and through the Python client."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.documents import make
from tests.support import run_cli, running_api
from tests.unit.test_extraction import report_pdf

ADMIN = "documents-admin-token-5d21"


def folder_of_documents(root):
    root.mkdir()
    (root / "otterworks-2024-10k.pdf").write_bytes(report_pdf())
    make.docx(root / "vault-guide.docx", "Vault guide", [("Rotating keys", ["Rotate the signing key every 90 days."]),
                                                          ("Revoking", ["Revoke a key at once when it leaks."])],
              table=[["key", "every"], ["signing", "90 days"], ["transport", "30 days"]])
    make.pptx(root / "roadmap.pptx", [("Roadmap", ["Kelp farms in Q1", "Otter sanctuary in Q2"]),
                                      ("Budget", ["Flat spending on walrus tusks"])])
    make.xlsx(root / "figures.xlsx", {"Revenue": [["year", "usd"], [2023, 10], [2024, 12]],
                                      "Costs": [["year", "narwhal feed"], [2024, 7]]})
    (root / "ports.csv").write_text("port,berths\nReykjavik,12\nTromsø,9\n")
    (root / "rotate.html").write_text(make.SPHINX_PAGE.format(
        intro="Keys are rotated on a schedule so that a leaked key expires on its own. " * 3,
        schedule="The signing key rotates every ninety days, the transport key monthly. " * 3))
    (root / "notes.md").write_text("# Notes\n\nPlain Markdown, read as before: sea cucumbers.\n")
    return root


def search(collection: str, query: str, k: int = 5, mode: str = "hybrid") -> list[dict]:
    result = run_cli("search", "-c", collection, query, "--json", "--k", str(k), "--mode", mode)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["hits"]


def test_a_folder_of_real_formats_is_indexed_with_pages_sections_and_titles(worker, collection_name, tmp_path):
    folder = folder_of_documents(tmp_path / "docs")
    result = run_cli("ingest", "-c", collection_name, "--contextualizer", "keywords", str(folder), "--json")
    summary = json.loads(result.stdout)
    assert result.returncode == 0 and summary["indexed"] == 7 and not summary["failed"], result.stdout + result.stderr
    from producers.retrieval.search import SearchOptions
    from workers.storage import catalog

    # Pages (the PDF's, the slides) and text side by side: RRF's k between text's and pages'.
    assert 10 < SearchOptions().resolved(catalog.load(collection_name)).rrf_k < 60

    balance = search(collection_name, "consolidated balance sheets total assets")[0]
    assert balance["doc_id"] == "otterworks-2024-10k.pdf" and balance["pages"] == [5, 5]
    assert balance["section"] == "PART II › Item 8. Financial Statements › Consolidated Balance Sheets"
    assert "Otterworks Annual Report 2024" not in balance["text"]  # its running header is gone
    assert "OTTERWORKS" in balance["context"] and "Form 10-K" in balance["context"]  # who and what, on every chunk
    printed = run_cli("search", "-c", collection_name, "consolidated balance sheets total assets").stdout
    assert "otterworks-2024-10k.pdf p. 5 · PART II › Item 8. Financial Statements › Consolidated Balance Sheets" in printed

    slide = search(collection_name, "walrus tusks")[0]
    assert slide["doc_id"] == "roadmap.pptx" and slide["pages"] == [2, 2] and slide["section"] == "Budget"
    sheet = search(collection_name, "narwhal feed")[0]
    assert sheet["doc_id"] == "figures.xlsx" and sheet["section"] == "Costs"
    tables = [h for h in search(collection_name, "signing 90 days transport 30 days", 10) if h["doc_id"] == "vault-guide.docx"]
    assert any("| signing | 90 days |" in h["text"] and "| transport | 30 days |" in h["text"] for h in tables)
    page = search(collection_name, "a leaked key expires on its own schedule")[0]
    assert page["doc_id"] == "rotate.html" and page["section"].startswith("Rotating keys")
    for noise in ("SCRIPTBODYTERM", "NAVLINKTERM", "SIDEBARTERM", "FOOTERTERM"):
        assert not search(collection_name, noise, mode="bm25"), noise  # in no chunk's text or context
    assert search(collection_name, "sea cucumbers")[0]["doc_id"] == "notes.md"

    state = json.loads(run_cli("status", "-c", collection_name, "--doc", "otterworks-2024-10k.pdf").stdout)
    assert state["pages"] == "6" and state["pages_without_text"] == "0" and state["media_type"] == "application/pdf"
    again = json.loads(run_cli("ingest", "-c", collection_name, str(folder), "--json").stdout)
    assert again["unchanged"] == 7  # the same bytes: nothing extracted or paid again


def test_hostile_files_fail_alone_with_their_reasons_and_the_worker_lives_on(worker, collection_name, tmp_path):
    folder = tmp_path / "hostile"
    expected = make.hostile(folder)
    (folder / "fine.pdf").write_bytes(make.pdf([["A fine page about otters and their stones."]]))
    result = run_cli("ingest", "-c", collection_name, "--contextualizer", "none", str(folder), "--json", timeout=900)
    summary = json.loads(result.stdout)
    failed = {f["doc_id"]: f["error"] for f in summary["failed"]}
    assert result.returncode == 1 and summary["indexed"] == 1, result.stdout
    assert set(failed) == set(expected), sorted(set(failed) ^ set(expected))
    for name, phrase in expected.items():
        assert phrase.lower() in failed[name].lower(), (name, failed[name])
    assert len(expected) >= 10
    assert worker.alive()
    assert search(collection_name, "otters stones")[0]["doc_id"] == "fine.pdf"


@pytest.fixture(scope="module")
def api():
    with running_api({"SITUATE_API_TOKEN": ADMIN}, secret=ADMIN) as server:
        yield server


def test_files_are_uploaded_through_the_api_and_the_client(api, worker, collection_name, tmp_path):
    from situate import SituateClient

    headers = {"Authorization": f"Bearer {ADMIN}"}
    base = f"{api.url}/v1/collections/{collection_name}"
    httpx.put(base, json={"contextualizer": "keywords"}, headers=headers).raise_for_status()
    report = report_pdf()
    multipart = httpx.post(f"{base}/files", headers=headers, files={"file": ("otterworks.pdf", report, "application/pdf")},
                           data={"metadata": json.dumps({"team": "finance"})})
    assert multipart.status_code == 202 and multipart.json()["documents"][0]["state"] == "queued", multipart.text
    guide = make.docx(tmp_path / "guide.docx", "Guide", [("Keys", ["Rotate the keys of the kelp vault."])])
    raw = httpx.post(f"{base}/files", params={"id": "handbook/guide.docx"}, content=guide.read_bytes(),
                     headers={**headers, "Content-Type": "application/vnd.openxmlformats-officedocument"
                                                         ".wordprocessingml.document"})
    assert raw.status_code == 202, raw.text
    refused = httpx.post(f"{base}/files", params={"id": "x.png"}, content=b"\x89PNG\r\n\x1a\nxxxx",
                         headers={**headers, "Content-Type": "image/png"})
    assert refused.json()["documents"][0]["state"] == "failed" and "PNG" in refused.json()["documents"][0]["error"]
    assert httpx.post(f"{base}/files", params={"id": "a"}, content=b"x").status_code == 401  # a token first
    with SituateClient(api.url, token=ADMIN) as client:
        deck = make.pptx(tmp_path / "deck.pptx", [("Plan", ["Count the otters of the bay"])])
        assert client.add_file(collection_name, deck)["state"] == "queued"
        final = client.wait(collection_name, ["otterworks.pdf", "handbook/guide.docx", "deck.pptx"], timeout=180)
        assert len(final) == 3 and all(d["state"] == "indexed" for d in final.values()), final
        hits = client.search(collection_name, "consolidated balance sheets total assets", k=3)
        assert hits[0]["doc_id"] == "otterworks.pdf" and hits[0]["pages"] == [5, 5]
        assert hits[0]["metadata"]["team"] == "finance"
        assert client.search(collection_name, "otters of the bay", k=1)[0]["doc_id"] == "deck.pptx"
