"""One Redis client and one OpenSearch client per process, built from settings.

Kept apart so tests, the API and the workers share the exact construction. Where the
services are not on loopback, they are reached as their URLs say:

- Redis: ``rediss://user:password@host:6380/0`` (TLS; ``SITUATE_REDIS_CA_CERTS`` for a private
  CA), or Sentinel: ``sentinel://:password@host1:26379/0;sentinel://host2:26379`` with the
  master's name in ``SITUATE_REDIS_SENTINEL_MASTER`` — Kombu's own URL form, so the broker and
  our state follow the same master through a failover (``sentinel_master``).
- OpenSearch: ``https://user:password@host:9200`` (``SITUATE_OPENSEARCH_CA_CERTS``), or Amazon
  OpenSearch Service with SigV4 request signing (``SITUATE_OPENSEARCH_AUTH=sigv4``: boto3's
  credential chain, ``SITUATE_OPENSEARCH_REGION``, service ``es`` or ``aoss``).
- S3 (bodies, ``ingest s3://``): boto3's credential chain and ``AWS_ENDPOINT_URL_S3``, with its
  own retries off: ``workers.faults`` retries every call out of the process, one way.

Credentials stay in these clients: printed URLs go through ``logs.mask_url``.
"""

from __future__ import annotations

import os
import ssl
from functools import lru_cache
from typing import Any
from urllib.parse import urlparse

import orjson
import redis
from opensearchpy import JSONSerializer, OpenSearch

from workers.errors import ConfigurationError
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


SENTINEL = "sentinel://"

# Redis cannot take this now: unreachable, too slow, or at its memory limit (``maxmemory`` with
# noeviction refuses every write that would add memory). Each passes; what was to be written is
# kept, or written again later.
REDIS_NOT_NOW: tuple[type[Exception], ...] = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                                               redis.exceptions.OutOfMemoryError)


def sentinel_nodes(url: str) -> tuple[list[tuple[str, int]], int, str | None]:
    """``sentinel://:pw@h1:26379/0;sentinel://h2:26379`` -> ([(h1, 26379), (h2, 26379)], 0, pw)."""
    nodes, db, password = [], 0, None
    for part in url.split(";"):
        u = urlparse(part.strip())
        nodes.append((u.hostname or "127.0.0.1", u.port or 26379))
        password = password or u.password
        if u.path.strip("/").isdigit():
            db = int(u.path.strip("/"))
    return nodes, db, password


def sentinel_master(decode_responses: bool) -> redis.Redis:
    """The current master as the sentinels name it; a failover is followed on the next
    command (redis-py's ``SentinelConnectionPool`` asks them again after a connection error)."""
    from redis.sentinel import Sentinel

    s = get_settings()
    if not s.redis_sentinel_master:
        raise ConfigurationError("a sentinel:// Redis URL needs SITUATE_REDIS_SENTINEL_MASTER (the master's name)")
    nodes, db, password = sentinel_nodes(s.redis_url)
    sentinel = Sentinel(nodes, socket_timeout=5, sentinel_kwargs={"password": s.redis_sentinel_password or None})
    return sentinel.master_for(s.redis_sentinel_master, db=db, password=password, decode_responses=decode_responses,
                               health_check_interval=30, socket_timeout=30)


def _redis(decode_responses: bool) -> redis.Redis:
    url = get_settings().redis_url
    if url.startswith(SENTINEL):
        return sentinel_master(decode_responses)
    return redis.Redis.from_url(url, decode_responses=decode_responses, health_check_interval=30, **redis_options())


@lru_cache(maxsize=1)
def redis_client() -> redis.Redis:
    return _redis(True)


@lru_cache(maxsize=1)
def redis_bytes_client() -> redis.Redis:
    """For document bodies, which are stored as raw bytes."""
    return _redis(False)


def broker_transport_extras() -> dict[str, Any]:
    """Kombu's transport options for a Sentinel URL: which master, and the sentinels' password."""
    s = get_settings()
    if not s.redis_url.startswith(SENTINEL):
        return {}
    extras: dict[str, Any] = {"master_name": s.redis_sentinel_master}
    if s.redis_sentinel_password:
        extras["sentinel_kwargs"] = {"password": s.redis_sentinel_password}
    return extras


class FastJSON(JSONSerializer):
    """opensearch-py's serializer, its JSON work done by orjson: a search's answer (each side's
    candidates) is parsed, and a bulk write's vectors written out, on the CPU the API and the
    workers share with OpenSearch. Whatever orjson declines (an integer past 64 bits, a type of
    pandas') goes to the standard library's path, unchanged."""

    OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY

    def loads(self, s: str) -> Any:
        try:
            return orjson.loads(s)
        except orjson.JSONDecodeError:
            return super().loads(s)  # raises opensearch-py's own SerializationError

    def dumps(self, data: Any) -> Any:
        if isinstance(data, str):
            return data
        try:
            return orjson.dumps(data, default=self.default, option=self.OPTIONS).decode()
        except TypeError:
            return super().dumps(data)


# Connections kept per node: the API's searches run side by side on its thread pool (as a threads
# worker's tasks do), and without a size opensearch-py's pool keeps one: every request beside
# another opened a connection of its own and closed it after.
OPENSEARCH_CONNECTIONS = 64


def opensearch_options() -> dict[str, Any]:
    s = get_settings()
    # Several nodes, comma-separated: requests go round them, and a node that stops answering
    # is set aside (and retried later) while the others serve, as a cluster losing a node needs.
    hosts = [u.strip() for u in s.opensearch_url.split(",") if u.strip()]
    url = urlparse(hosts[0])
    options: dict[str, Any] = {"hosts": hosts, "timeout": 60, "max_retries": 3, "retry_on_timeout": True,
                               "http_compress": True, "serializer": FastJSON(), "pool_maxsize": OPENSEARCH_CONNECTIONS}
    if url.scheme == "https":
        options.update(use_ssl=True, verify_certs=True, ca_certs=s.opensearch_ca_certs or None)
    if s.opensearch_auth == "sigv4":
        import boto3
        from opensearchpy import AWSV4SignerAuth, RequestsHttpConnection

        credentials = boto3.Session().get_credentials()
        if credentials is None:
            raise ConfigurationError("SITUATE_OPENSEARCH_AUTH=sigv4 needs AWS credentials (boto3's chain found none)")
        region = s.opensearch_region or boto3.Session().region_name or "us-east-1"
        options.update(http_auth=AWSV4SignerAuth(credentials, region, s.opensearch_service),
                       connection_class=RequestsHttpConnection, http_compress=False)
    return options


@lru_cache(maxsize=1)
def opensearch_client() -> OpenSearch:
    return OpenSearch(**opensearch_options())


@lru_cache(maxsize=1)
def opensearch_search_client() -> OpenSearch:
    """For queries: their requests and answers are small and their time is the CPU of both ends,
    which gzip adds to without saving anything worth it (``ops/bench clients --sweep``). Writes,
    bulk vectors sent a network away, keep ``opensearch_client``'s compression."""
    return OpenSearch(**{**opensearch_options(), "http_compress": False})


@lru_cache(maxsize=1)
def s3_client() -> Any:
    """boto3's S3 client: one attempt per call (``faults.call`` makes the others), timeouts bounded."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=10,
                                            read_timeout=get_settings().provider_timeout_s))


def _forget_connections_in_child() -> None:
    """A forked process (a pool child Celery starts, or starts again after one died) makes its own
    clients: HTTP connections opened by its parent would be shared, and two processes reading one
    socket take each other's answers (seen in the compose test: a search answered with another
    request's body, ``KeyError: 'hits'``). redis-py's pools do this themselves (by pid)."""
    opensearch_client.cache_clear()
    opensearch_search_client.cache_clear()
    s3_client.cache_clear()


os.register_at_fork(after_in_child=_forget_connections_in_child)
