"""One Redis client and one OpenSearch client per process, built from settings.

Kept apart so tests, the API and the workers share the exact construction. Where the
services are not on loopback, they are reached as their URLs say:

- Redis: ``rediss://user:password@host:6380/0`` (TLS; ``SITUATE_REDIS_CA_CERTS`` for a private
  CA), or Sentinel (``sentinel://…``, see ``redis_sentinel``).
- OpenSearch: ``https://user:password@host:9200`` (``SITUATE_OPENSEARCH_CA_CERTS``), or Amazon
  OpenSearch Service with SigV4 request signing (``SITUATE_OPENSEARCH_AUTH=sigv4``: boto3's
  credential chain, ``SITUATE_OPENSEARCH_REGION``, service ``es`` or ``aoss``).

Credentials stay in these clients: printed URLs go through ``logs.mask_url``.
"""

from __future__ import annotations

import ssl
from functools import lru_cache
from typing import Any
from urllib.parse import urlparse

import redis
from opensearchpy import OpenSearch

from workers.settings import get_settings


def redis_options() -> dict[str, Any]:
    """Options for redis-py beside the URL: the CA for ``rediss://``."""
    s = get_settings()
    if s.redis_url.startswith("rediss://") and s.redis_ca_certs:
        return {"ssl_ca_certs": s.redis_ca_certs, "ssl_cert_reqs": "required"}
    return {}


def broker_ssl() -> dict[str, Any] | None:
    """The same TLS settings, as Celery's ``broker_use_ssl`` wants them."""
    s = get_settings()
    if not s.redis_url.startswith("rediss://"):
        return None
    options: dict[str, Any] = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    if s.redis_ca_certs:
        options["ssl_ca_certs"] = s.redis_ca_certs
    return options


@lru_cache(maxsize=1)
def redis_client() -> redis.Redis:
    return redis.Redis.from_url(get_settings().redis_url, decode_responses=True, health_check_interval=30,
                                **redis_options())


@lru_cache(maxsize=1)
def redis_bytes_client() -> redis.Redis:
    """For document bodies, which are stored as raw bytes."""
    return redis.Redis.from_url(get_settings().redis_url, decode_responses=False, health_check_interval=30,
                                **redis_options())


def opensearch_options() -> dict[str, Any]:
    s = get_settings()
    url = urlparse(s.opensearch_url)
    options: dict[str, Any] = {"hosts": [s.opensearch_url], "timeout": 60, "max_retries": 3,
                               "retry_on_timeout": True, "http_compress": True}
    if url.scheme == "https":
        options.update(use_ssl=True, verify_certs=True, ca_certs=s.opensearch_ca_certs or None)
    if s.opensearch_auth == "sigv4":
        import boto3
        from opensearchpy import AWSV4SignerAuth, RequestsHttpConnection

        credentials = boto3.Session().get_credentials()
        if credentials is None:
            raise RuntimeError("SITUATE_OPENSEARCH_AUTH=sigv4 needs AWS credentials (boto3's chain found none)")
        region = s.opensearch_region or boto3.Session().region_name or "us-east-1"
        options.update(http_auth=AWSV4SignerAuth(credentials, region, s.opensearch_service),
                       connection_class=RequestsHttpConnection, http_compress=False)
    return options


@lru_cache(maxsize=1)
def opensearch_client() -> OpenSearch:
    return OpenSearch(**opensearch_options())
