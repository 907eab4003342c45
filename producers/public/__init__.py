"""situate's public face, installed as the package ``situate`` (``pyproject.toml`` maps it here,
so the repository's top level stays as it is): what a user's code imports, and nothing else.

    from situate import SituateClient
    with SituateClient("http://127.0.0.1:8000", token="...") as c:
        hits = c.search("docs", "what is a?", k=5)

The names below are the API we keep (``SituateError``: what the clients raise when the API
answers with an error, its message; ``PublicError`` its base, whose messages are written for
users); anything reached through ``workers.*`` or ``producers.*``
is internal and may move. The framework retrievers need their extras (``situate[langchain]``,
``situate[llamaindex]``) and are imported on first use, so ``import situate`` needs neither.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from producers.client import AsyncSituateClient, SituateClient
from workers.errors import PublicError, SituateError

try:
    __version__ = metadata.version("situate")
except metadata.PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"

__all__ = [
    "AsyncSituateClient",
    "LangChainRetriever",
    "LlamaIndexRetriever",
    "PublicError",
    "SituateClient",
    "SituateError",
    "__version__",
]

_RETRIEVERS = {"LangChainRetriever": "producers.integrations.langchain",
               "LlamaIndexRetriever": "producers.integrations.llamaindex"}


def __getattr__(name: str) -> Any:
    """The retrievers, imported when first asked for: each pulls in its framework."""
    if name in _RETRIEVERS:
        import importlib

        return importlib.import_module(_RETRIEVERS[name]).SituateRetriever
    raise AttributeError(f"module 'situate' has no attribute {name!r}")
