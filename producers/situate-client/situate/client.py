"""A small Python client for the HTTP API, and its async twin for the read side (search and
documents' states: what agents and the framework retrievers need).

    from situate import SituateClient
    with SituateClient("http://127.0.0.1:8000", token="...") as c:
        c.add_documents("docs", [{"id": "a", "text": "..."}])
        c.add_file("docs", "reports/3M_2018_10K.pdf")
        c.wait("docs", ["a"])
        hits = c.search("docs", "what is a?", k=5)

    async with AsyncSituateClient("http://127.0.0.1:8000", token="...") as c:
        hits = await c.search("docs", "what is a?", k=5)
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from situate.errors import SituateError


def _search_body(query: str, k: int, filters: dict[str, Any] | None, mode: str, options: dict[str, Any]) -> dict[str, Any]:
    return {"query": query, "k": k, "filters": filters, "mode": mode, **options}


def _busy_wait(response: httpx.Response, give_up: float) -> int | None:
    """Seconds to wait before asking again: a 503 with Retry-After (the server's Redis is
    draining), while patience lasts; else None."""
    retry_after = response.headers.get("retry-after", "")
    if response.status_code == 503 and retry_after.isdigit() and time.monotonic() < give_up:
        return int(retry_after)
    return None


def _result(method: str, path: str, response: httpx.Response) -> Any:
    if response.status_code >= 400:
        raise SituateError(f"{method} {path} -> {response.status_code}: {response.text[:500]}", response.status_code)
    return response.json()


class SituateClient:
    def __init__(self, base_url: str = "http://127.0.0.1:8000", token: str | None = None, timeout: float = 60.0):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout)

    def __enter__(self) -> SituateClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, busy_patience_s: float = 600, **kwargs: Any) -> Any:
        """One request; a 503 with Retry-After (the server's Redis is draining) waits and asks
        again, up to ``busy_patience_s``."""
        give_up = time.monotonic() + busy_patience_s
        while True:
            response = self._http.request(method, path, **kwargs)
            wait = _busy_wait(response, give_up)
            if wait is None:
                return _result(method, path, response)
            time.sleep(wait)

    def create_collection(self, collection: str, **settings: Any) -> dict[str, Any]:
        return self._call("PUT", f"/v1/collections/{collection}", json=settings)

    def add_documents(self, collection: str, documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each document: ``{"id", "text", "metadata"?, "chunks"?}``. Returns one entry per document."""
        return self._call("POST", f"/v1/collections/{collection}/documents", json={"documents": documents})["documents"]

    def add_file(self, collection: str, path: str | Path, doc_id: str | None = None,
                 metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """Upload a file as it is (PDF, DOCX, PPTX, XLSX, CSV, HTML, text): the workers extract it.
        Its id is ``doc_id``, or the file's name. Returns its entry (state, version, error)."""
        path = Path(path)
        data = {"id": doc_id or path.name, **({"metadata": json.dumps(metadata)} if metadata else {})}
        # Read once: a 503 (Redis draining) sends it again, which a half-read file could not.
        return self._call("POST", f"/v1/collections/{collection}/files", data=data,
                          files={"file": (path.name, path.read_bytes())})["documents"][0]

    def get_document(self, collection: str, doc_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/collections/{collection}/documents/{quote(doc_id)}")

    def delete_document(self, collection: str, doc_id: str) -> dict[str, Any]:
        """Remove a document from the index and from Redis."""
        return self._call("DELETE", f"/v1/collections/{collection}/documents/{quote(doc_id)}")

    def delete_collection(self, collection: str) -> dict[str, Any]:
        """Drop a collection: its index and everything situate keeps about it."""
        return self._call("DELETE", f"/v1/collections/{collection}")

    def wait(self, collection: str, doc_ids: list[str], timeout: float = 600, poll_s: float = 0.5) -> dict[str, dict[str, Any]]:
        """Poll until every document is indexed or failed; returns their states. Indexed
        documents are searchable when it returns (as after ``situate ingest``)."""
        deadline = time.monotonic() + timeout
        states: dict[str, dict[str, Any]] = {}
        pending = list(doc_ids)
        while pending:
            for doc_id in list(pending):
                doc = self.get_document(collection, doc_id)
                if doc["state"] in ("indexed", "failed"):
                    states[doc_id] = doc
                    pending.remove(doc_id)
            if pending:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"still pending after {timeout}s: {pending[:10]}")
                time.sleep(poll_s)
        if any(doc["state"] == "indexed" for doc in states.values()):
            self._call("POST", f"/v1/collections/{collection}/refresh")
        return states

    def search(self, collection: str, query: str, k: int = 10, filters: dict[str, Any] | None = None,
               mode: str = "hybrid", **options: Any) -> list[dict[str, Any]]:
        """``options``: fusion, context_weight, dense_weight, rrf_k, reranker (default: the collection's)."""
        body = _search_body(query, k, filters, mode, options)
        return self._call("POST", f"/v1/collections/{collection}/search", json=body)["hits"]


class AsyncSituateClient:
    """The read side of ``SituateClient`` on asyncio (``httpx.AsyncClient``)."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", token: str | None = None, timeout: float = 60.0):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout)

    async def __aenter__(self) -> AsyncSituateClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, busy_patience_s: float = 600, **kwargs: Any) -> Any:
        give_up = time.monotonic() + busy_patience_s
        while True:
            response = await self._http.request(method, path, **kwargs)
            wait = _busy_wait(response, give_up)
            if wait is None:
                return _result(method, path, response)
            await asyncio.sleep(wait)

    async def get_document(self, collection: str, doc_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/collections/{collection}/documents/{quote(doc_id)}")

    async def search(self, collection: str, query: str, k: int = 10, filters: dict[str, Any] | None = None,
                     mode: str = "hybrid", **options: Any) -> list[dict[str, Any]]:
        body = _search_body(query, k, filters, mode, options)
        return (await self._call("POST", f"/v1/collections/{collection}/search", json=body))["hits"]
