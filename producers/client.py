"""0.2's import path of the Python client, kept for code written against it: the client is the
package ``situate`` now (``from situate import SituateClient``), shipped alone as
``situate-client`` (producers/situate-client/) and inside the server's distribution."""

from __future__ import annotations

from situate.client import AsyncSituateClient, SituateClient

__all__ = ["AsyncSituateClient", "SituateClient"]
