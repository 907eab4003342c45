"""A LlamaIndex retriever over a situate collection (``pip install 'situate-client[llamaindex]'``).

    from situate import LlamaIndexRetriever  # this class
    retriever = LlamaIndexRetriever(collection="docs", url="http://127.0.0.1:8000", token="...", k=5)
    nodes = retriever.retrieve("what does the kernel schedule?")
    nodes[0].score, nodes[0].node.metadata["citation"]

Each hit is a ``TextNode`` (id ``doc_id#chunk``, the chunk's text, the citation in its metadata)
in a ``NodeWithScore`` with the API's score. The citation fields are kept out of the text an LLM
or an embedder sees of the node (``excluded_*_metadata_keys``), except the one-line citation.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from situate.citations import citation_metadata
from situate.client import AsyncSituateClient, SituateClient

_HIDDEN = ["doc_id", "chunk", "score", "pages", "section", "title", "context", "metadata"]


class SituateRetriever(BaseRetriever):
    def __init__(self, collection: str, url: str = "http://127.0.0.1:8000", token: str | None = None, k: int = 10,
                 filters: dict[str, Any] | None = None, mode: str = "hybrid", timeout: float = 60.0,
                 **search_options: Any):
        super().__init__()
        self.collection, self.url, self.k, self.filters, self.mode = collection, url, k, filters, mode
        self.search_options, self.timeout = search_options, timeout
        self._token = token
        self._client: SituateClient | None = None

    def __repr__(self) -> str:  # never the token
        return f"SituateRetriever(collection={self.collection!r}, url={self.url!r}, k={self.k})"

    def _request(self) -> dict[str, Any]:
        return {"k": self.k, "filters": self.filters, "mode": self.mode, **self.search_options}

    @staticmethod
    def _nodes(hits: list[dict[str, Any]]) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(id_=f"{h['doc_id']}#{h['chunk']}", text=h["text"],
                                            metadata=citation_metadata(h), excluded_llm_metadata_keys=_HIDDEN,
                                            excluded_embed_metadata_keys=_HIDDEN), score=h["score"])
                for h in hits]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        if self._client is None:
            self._client = SituateClient(self.url, token=self._token, timeout=self.timeout)
        return self._nodes(self._client.search(self.collection, query_bundle.query_str, **self._request()))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        async with AsyncSituateClient(self.url, token=self._token, timeout=self.timeout) as client:
            return self._nodes(await client.search(self.collection, query_bundle.query_str, **self._request()))
