"""Which workers are online, and what each is doing: the records, for readers without Celery.

Every heartbeat a worker writes one short-lived key (``pipeline.presence.announce`` builds it
from the Celery consumer): its name, queues, pool size and the tasks it is running. A worker
that stops or dies simply stops writing, and its key lapses within three heartbeats: no
deregistration to forget, nothing to clean up (a sorted set of names by when each record lapses
lists them without a scan of the keyspace). ``/metrics``, the dashboard and autoscalers read
them here, so the API never imports Celery's worker modules to know who is online.
"""

from __future__ import annotations

import json
import time
from typing import Any, cast

from workers import keys
from workers.connections import redis_client
from workers.settings import get_settings

PREFIX = keys.WORKERS


def write(hostname: str, record: dict[str, Any]) -> None:
    ttl = max(5, round(3 * get_settings().heartbeat_s))
    pipe = redis_client().pipeline(transaction=False)
    pipe.set(PREFIX + hostname, json.dumps(record), ex=ttl)
    pipe.zadd(keys.WORKERS_ONLINE, {hostname: time.time() + ttl})
    pipe.execute()


def online() -> list[dict[str, Any]]:
    """The workers whose record has not lapsed: read from the index of names by when each
    lapses, never by a scan of the keyspace (which holds a key per document)."""
    r, now = redis_client(), time.time()
    r.zremrangebyscore(keys.WORKERS_ONLINE, "-inf", now)
    names = sorted(cast("list[str]", r.zrangebyscore(keys.WORKERS_ONLINE, now, "+inf")))
    return [json.loads(raw) for raw in (r.mget([PREFIX + n for n in names]) if names else []) if raw]
