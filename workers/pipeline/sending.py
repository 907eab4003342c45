"""Sending work to the workers by task name: the Celery configuration a producer needs, and no more.

The API and the CLI send messages; they never run tasks. Importing the worker's application for
that (``app``) pulled in the delivery machinery, its bootsteps and signal handlers, into every
API process. Here is the part both sides share — broker, serialization (JSON only: a pickle
payload from the broker is code execution), queue routes and the transport options that must
agree between sender and consumer (priority levels, visibility) — and a send-only Celery
instance built from it, made on first use. A worker process replaces that instance with its own
application (``install``), so it sends over the same connection pool it consumes with.
"""

from __future__ import annotations

import time
from typing import Any

from celery import Celery
from celery.signals import before_task_publish

from workers import keys
from workers.connections import broker_ssl, broker_transport_extras
from workers.pipeline.routing import CHUNK_QUEUE, INDEX_QUEUE, PRIORITY_SEP, PRIORITY_STEPS, QUEUED_AT_HEADER
from workers.settings import get_settings

# Celery task names: "situate.<stage>", the Python function's name after the dot.
CHUNK_TASK = "situate.chunk"
CONTEXTUALIZE_TASK = "situate.contextualize"
INDEX_TASK = "situate.index"
COLLECT_BUNDLE_TASK = "situate.collect_bundle"  # one-chunk documents taken from their pool as a bundle
INDEX_BUNDLE_TASK = "situate.index_bundle"  # a bundle's documents indexed together
CONTEXTUALIZE_BUNDLE_TASK = "situate.contextualize_bundle"  # a bundle's documents' calls, together
BUNDLE_TASKS = (CONTEXTUALIZE_BUNDLE_TASK, INDEX_BUNDLE_TASK)  # (collection, bundle id, [[doc id, version], ...])
SLICE_TASK = "situate.contextualize_slice"
POLL_BATCH_TASK = "situate.poll_batch"  # 0.2's batches of one document, still in flight after an upgrade
TEND_BATCHES_TASK = "situate.tend_batches"

_app: Celery | None = None


def redis_full_is_a_connection_error() -> None:
    """A Redis at ``maxmemory`` refuses writes — Kombu's sends, acknowledgements and restores
    included — with OutOfMemoryError, which Celery does not know: a worker's consumer stopped
    ("Unrecoverable error"). As a connection error instead, the operation is retried with
    backoff (a worker's messages come back once memory is free; a task done but not acknowledged
    runs again, as a no-op). Kombu keeps the tuple on its Redis transport class (the Sentinel
    transport inherits it)."""
    from kombu.transport import redis as kombu_redis
    from redis.exceptions import OutOfMemoryError

    if OutOfMemoryError not in kombu_redis.Transport.connection_errors:
        kombu_redis.Transport.connection_errors = (*kombu_redis.Transport.connection_errors, OutOfMemoryError)


def configure(app: Celery) -> Celery:
    """What sender and consumer must agree on; the worker adds its own (``app``)."""
    redis_full_is_a_connection_error()
    s = get_settings()
    app.conf.update(
        broker_url=s.redis_url,
        task_serializer="json",
        result_serializer="json",
        event_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,  # state lives in ``storage.states``; no result backend to fill up
        # A dead worker's messages are given back by any live one's sweep (every heartbeat_s)
        # once their heartbeat is visibility_timeout old (see delivery). The sweep's lock must
        # not outlive a worker killed while holding it by much more than a sweep.
        broker_transport_options={"visibility_timeout": s.visibility_timeout_s,
                                  "unacked_restore_interval": s.heartbeat_s, "unacked_restore_throttle": 1,
                                  "unacked_mutex_expire": max(5, round(s.heartbeat_s)),
                                  "unacked_key": keys.KOMBU_UNACKED, "unacked_index_key": keys.KOMBU_UNACKED_INDEX,
                                  "unacked_mutex_key": keys.KOMBU_UNACKED_MUTEX,
                                  "priority_steps": PRIORITY_STEPS, "sep": PRIORITY_SEP,
                                  "queue_order_strategy": "priority", **broker_transport_extras()},
        broker_connection_retry_on_startup=True,
        broker_use_ssl=broker_ssl(),
        task_default_queue=CHUNK_QUEUE,
        task_routes={CHUNK_TASK: {"queue": CHUNK_QUEUE}, INDEX_TASK: {"queue": INDEX_QUEUE}},
        # No "task-sent" event: a PUBLISH per message sent, for Flower to show a task before a worker
        # receives it (which the workers' own events show, a moment later).
        task_send_sent_event=False,
    )
    return app


def install(app: Celery) -> None:
    """Send through ``app`` from now on (a worker's own application)."""
    global _app
    _app = app


def app() -> Celery:
    """The Celery instance this process sends with: the worker's, or a send-only one."""
    global _app
    if _app is None:
        _app = configure(Celery("situate", set_as_current=False))
    return _app


def send_task(name: str, args: list[Any], queue: str, priority: int = 0, task_id: str | None = None,
              countdown: float | None = None) -> None:
    app().send_task(name, args=args, queue=queue, priority=priority, task_id=task_id, countdown=countdown)


@before_task_publish.connect
def stamp_queued_time(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """When the message was queued: the age of a queue's oldest message is the backlog an
    operator (and an autoscaler) watches; Celery's messages carry no such time of their own."""
    if headers is not None:
        headers.setdefault(QUEUED_AT_HEADER, round(time.time(), 3))
