"""A worker announcing itself: what its Celery consumer is running, written on every heartbeat.

The record's home and its readers are ``storage.presence``; this half reads Celery's live
request sets, so only worker processes import it. Celery's own events (Flower) tell the same
story, but only to a process that listened while it happened.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from celery.worker import state as worker_state

from workers.storage import presence


def copy_of(requests: set[Any]) -> list[Any] | None:
    """A copy of one of Celery's live request sets, which the consumer may change while we copy
    it (None if it kept changing)."""
    for _ in range(3):
        try:
            return list(requests)
        except RuntimeError:
            continue
    return None


def announce(consumer: Any) -> None:
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
    presence.write(consumer.hostname, record)
