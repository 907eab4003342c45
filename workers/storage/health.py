"""Do the stores answer? The API's readiness (``GET /readyz``): a pod whose Redis or OpenSearch
is away is taken out of the Service, and restarted by nothing (its liveness reads no store)."""

from __future__ import annotations

from workers.connections import opensearch_client, redis_client


def unreachable() -> dict[str, str]:
    """The stores that do not answer now, each with the kind of its failure ({} when both do)."""
    down = {}
    for name, ping in (("redis", lambda: redis_client().ping()), ("opensearch", lambda: opensearch_client().ping())):
        try:
            if not ping():
                down[name] = "no answer"
        except Exception as e:  # noqa: BLE001 - any failure is "not ready", said with its kind
            down[name] = type(e).__name__
    return down
