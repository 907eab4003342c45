"""One Redis client and one OpenSearch client per process, built from settings.

Kept apart so tests and the API share the exact construction the workers use. OpenSearch over
HTTPS on AWS (managed OpenSearch) would add SigV4 auth here and nowhere else.
"""

from __future__ import annotations

from functools import lru_cache

import redis
from opensearchpy import OpenSearch

from workers.settings import get_settings


@lru_cache(maxsize=1)
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(get_settings().redis_url, decode_responses=True)


@lru_cache(maxsize=1)
def redis_bytes_client() -> redis.Redis:
    """For document bodies, which are stored as raw bytes."""
    return redis.Redis.from_url(get_settings().redis_url, decode_responses=False)


@lru_cache(maxsize=1)
def opensearch_client() -> OpenSearch:
    return OpenSearch(
        hosts=[get_settings().opensearch_url],
        timeout=60,
        max_retries=3,
        retry_on_timeout=True,
        http_compress=True,
    )
