"""Which workers are online, and what each is doing: for ``/metrics``, the dashboard, autoscalers.

Every heartbeat (``delivery.Heartbeat``) a worker writes one short-lived Redis key: its name,
queues, pool size and the tasks it is running (stage, collection, document, for how long).
A worker that stops or dies simply stops writing, and its key lapses within three heartbeats:
no deregistration to forget, nothing to clean up. Celery's own events (Flower) tell the same
story, but only to a process that listened while it happened.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time

from celery.worker import state as worker_state

from workers import keys
from workers.connections import redis_client
from workers.settings import get_settings

log = logging.getLogger("situate.presence")

PREFIX = keys.WORKERS


def copy_of(requests: set) -> list | None:
    """A copy of one of Celery's live request sets, which the consumer may change while we copy
    it (None if it kept changing)."""
    for _ in range(3):
        try:
            return list(requests)
        except RuntimeError:
            continue
    return None


def announce(consumer) -> None:
    now = time.time()
    doing = []
    for request in copy_of(worker_state.active_requests) or []:
        args = list(getattr(request, "args", None) or [])
        started = getattr(request, "time_start", None)
        doing.append({"task": request.task_name, "collection": args[0] if args else None,
                      "doc_id": args[1] if len(args) > 1 else None,
                      "running_s": round(now - started, 1) if started else None})
    try:
        queues = sorted(q.name for q in consumer.task_consumer.queues)
    except Exception:  # not consuming yet
        queues = []
    record = {"hostname": consumer.hostname, "host": socket.gethostname(), "pid": os.getpid(),
              "queues": queues, "concurrency": getattr(consumer.pool, "num_processes", None) or
              getattr(consumer.controller, "concurrency", None), "active": doing, "seen": now}
    ttl = max(5, round(3 * get_settings().heartbeat_s))
    redis_client().set(PREFIX + consumer.hostname, json.dumps(record), ex=ttl)


def online() -> list[dict]:
    r = redis_client()
    names = sorted(r.scan_iter(PREFIX + "*", count=1000))
    return [json.loads(raw) for raw in (r.mget(names) if names else []) if raw]
