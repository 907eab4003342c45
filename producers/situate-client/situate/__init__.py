"""situate's Python client: what a user's code imports, and nothing of the server.

    from situate import SituateClient
    with SituateClient("http://127.0.0.1:8000", token="...") as c:
        hits = c.search("docs", "what is a?", k=5)

Installed alone by ``pip install situate-client`` (httpx is its one dependency), and with the
server by ``pip install situate``. The names below are the API we keep: the sync and async
clients, ``SituateError`` (what they raise when the API answers with an error; ``PublicError``
its base) and the framework retrievers, which need their extras
(``situate-client[langchain]``, ``situate-client[llamaindex]``) and are imported on first use, so
``import situate`` needs neither.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from situate.client import AsyncSituateClient, SituateClient
from situate.errors import PublicError, SituateError


def _version() -> str:
    for distribution in ("situate-client", "situate"):  # alone, or inside the server's
        try:
            return metadata.version(distribution)
        except metadata.PackageNotFoundError:
            continue
    return "0+unknown"  # run from a checkout that was never installed


__version__ = _version()

__all__ = [
    "AsyncSituateClient",
    "LangChainRetriever",
    "LlamaIndexRetriever",
    "PublicError",
    "SituateClient",
    "SituateError",
    "__version__",
]

_RETRIEVERS = {"LangChainRetriever": "situate.langchain", "LlamaIndexRetriever": "situate.llamaindex"}


def __getattr__(name: str) -> Any:
    """The retrievers, imported when first asked for: each pulls in its framework."""
    if name in _RETRIEVERS:
        import importlib

        return importlib.import_module(_RETRIEVERS[name]).SituateRetriever
    raise AttributeError(f"module 'situate' has no attribute {name!r}")
