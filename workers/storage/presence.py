"""Which workers are online, and what each is doing: the records, for readers without Celery.

Every heartbeat a worker writes one short-lived key (``pipeline.presence.announce`` builds it
from the Celery consumer): its name, queues, pool size and the tasks it is running. A worker
that stops or dies simply stops writing, and its key lapses within three heartbeats: no
deregistration to forget, nothing to clean up. ``/metrics``, the dashboard and autoscalers read
them here, so the API never imports Celery's worker modules to know who is online.
"""

from __future__ import annotations

import json
from typing import Any

from workers import keys
from workers.connections import redis_client
from workers.settings import get_settings

PREFIX = keys.WORKERS


def write(hostname: str, record: dict[str, Any]) -> None:
    ttl = max(5, round(3 * get_settings().heartbeat_s))
    redis_client().set(PREFIX + hostname, json.dumps(record), ex=ttl)


def online() -> list[dict[str, Any]]:
    r = redis_client()
    names = sorted(r.scan_iter(PREFIX + "*", count=1000))
    return [json.loads(raw) for raw in (r.mget(names) if names else []) if raw]
