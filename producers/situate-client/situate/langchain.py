"""A LangChain retriever over a situate collection (``pip install 'situate-client[langchain]'``).

    from situate import LangChainRetriever  # this class
    retriever = LangChainRetriever(collection="docs", url="http://127.0.0.1:8000", token="...", k=5)
    docs = retriever.invoke("what does the kernel schedule?")
    docs[0].metadata["citation"]   # '3M_2018_10K.pdf p. 60 · Item 8 › Cash flows'

``invoke(query, k=..., filters=...)`` overrides the retriever's own for one call. A document's
``page_content`` is the chunk's text; its situating context is in ``metadata["context"]``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, PrivateAttr, SecretStr

from situate.citations import citation_metadata
from situate.client import AsyncSituateClient, SituateClient


class SituateRetriever(BaseRetriever):
    collection: str
    url: str = "http://127.0.0.1:8000"
    token: SecretStr | None = None  # kept out of reprs and traces
    k: int = 10
    filters: dict[str, Any] | None = None
    mode: str = "hybrid"
    search_options: dict[str, Any] = Field(default_factory=dict, description="fusion, reranker, dense_weight, …")
    timeout: float = 60.0

    _client: SituateClient | None = PrivateAttr(default=None)

    def _token(self) -> str | None:
        return self.token.get_secret_value() if self.token else None

    def _request(self, k: int | None, filters: dict[str, Any] | None) -> dict[str, Any]:
        return {"k": k or self.k, "filters": filters if filters is not None else self.filters, "mode": self.mode,
                **self.search_options}

    @staticmethod
    def _documents(hits: list[dict[str, Any]]) -> list[Document]:
        return [Document(page_content=h["text"], metadata=citation_metadata(h), id=f"{h['doc_id']}#{h['chunk']}")
                for h in hits]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None, filters: dict[str, Any] | None = None) -> list[Document]:
        if self._client is None:  # one connection pool for the retriever's life
            self._client = SituateClient(self.url, token=self._token(), timeout=self.timeout)
        return self._documents(self._client.search(self.collection, query, **self._request(k, filters)))

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None, filters: dict[str, Any] | None = None) -> list[Document]:
        # A client per call: an httpx.AsyncClient belongs to the event loop it was made on.
        async with AsyncSituateClient(self.url, token=self._token(), timeout=self.timeout) as client:
            return self._documents(await client.search(self.collection, query, **self._request(k, filters)))
