"""The Celery application: broker, serialization, delivery guarantees.

Delivery is at least once (``acks_late``; a task whose worker dies is delivered again, within
``SITUATE_RECOVERY_S`` thanks to the workers' heartbeat: ``delivery``), so every task is
idempotent: version-guarded state that only moves forward, checkpointed contexts, per-version
chunk ids, and a lease so that one delivery at a time works on a unit.
JSON only: a pickle payload from the broker is code execution. Queues and their order are
``routing``'s; the tasks are in ``tasks`` (loaded by workers only: producers send by name).
"""

from __future__ import annotations

import importlib
import logging
import os
import time

from celery import Celery
from celery.signals import before_task_publish, setup_logging, task_postrun, task_prerun, worker_init

from workers import logs
from workers.connections import broker_ssl, broker_transport_extras
from workers.pipeline.delivery import Heartbeat
from workers.pipeline.routing import CHUNK_QUEUE, INDEX_QUEUE, PRIORITY_SEP, PRIORITY_STEPS, QUEUED_AT_HEADER
from workers.settings import get_settings

# Celery task names: "situate.<stage>", the Python function's name after the dot.
CHUNK_TASK = "situate.chunk"
CONTEXTUALIZE_TASK = "situate.contextualize"
INDEX_TASK = "situate.index"
SLICE_TASK = "situate.contextualize_slice"


def _redis_full_is_a_connection_error() -> None:
    """A Redis at ``maxmemory`` refuses writes — Kombu's acknowledgement and restore included —
    with OutOfMemoryError, which Celery's consumer does not know: it stopped the worker
    ("Unrecoverable error"). As a connection error instead, a failed acknowledgement is logged
    and the consumer reconnects with backoff; the messages it held come back once memory is free
    (a task done but not acknowledged runs again, as a no-op: states and checkpoints). Kombu
    keeps the tuple on its Redis transport class (the Sentinel transport inherits it)."""
    from kombu.transport import redis as kombu_redis
    from redis.exceptions import OutOfMemoryError

    if OutOfMemoryError not in kombu_redis.Transport.connection_errors:
        kombu_redis.Transport.connection_errors = (*kombu_redis.Transport.connection_errors, OutOfMemoryError)


def make_app() -> Celery:
    _redis_full_is_a_connection_error()
    s = get_settings()
    app = Celery("situate", broker=s.redis_url, include=["workers.pipeline.tasks"])
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        event_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,  # state lives in ``storage.states``; no result backend to fill up
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # A dead worker's messages are given back by any live one's sweep (every heartbeat_s)
        # once their heartbeat is visibility_timeout old (see delivery). The sweep's lock must
        # not outlive a worker killed while holding it by much more than a sweep.
        broker_transport_options={"visibility_timeout": s.visibility_timeout_s,
                                  "unacked_restore_interval": s.heartbeat_s, "unacked_restore_throttle": 1,
                                  "unacked_mutex_expire": max(5, round(s.heartbeat_s)),
                                  "priority_steps": PRIORITY_STEPS, "sep": PRIORITY_SEP,
                                  "queue_order_strategy": "priority", **broker_transport_extras()},
        broker_connection_retry_on_startup=True,
        broker_use_ssl=broker_ssl(),
        task_time_limit=s.task_time_limit_s,
        task_soft_time_limit=s.task_time_limit_s - 60,
        task_default_queue=CHUNK_QUEUE,
        task_routes={CHUNK_TASK: {"queue": CHUNK_QUEUE}, INDEX_TASK: {"queue": INDEX_QUEUE}},
        worker_send_task_events=True,  # for Flower
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
    )
    app.steps["consumer"].add(Heartbeat)
    return app


app = make_app()


# The provider SDKs a worker has credentials for, imported before it takes work: ``anthropic``
# alone takes ~3 s of CPU to import, which a fresh worker (several at once on 2 cores: much
# longer) would otherwise spend while its first documents wait.
PRELOAD = {"ANTHROPIC_API_KEY": "anthropic", "ANTHROPIC_AUTH_TOKEN": "anthropic", "VOYAGE_API_KEY": "voyageai",
           "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "boto3", "AWS_ACCESS_KEY_ID": "boto3", "AWS_PROFILE": "boto3"}


@setup_logging.connect
def json_logs(loglevel=None, **_) -> None:
    """Celery leaves logging to us when this signal has a receiver: JSON lines, no secrets."""
    logs.configure(loglevel if isinstance(loglevel, str) else logging.getLevelName(loglevel or logging.INFO))


@before_task_publish.connect
def stamp_queued_time(headers=None, **_) -> None:
    """When the message was queued: the age of a queue's oldest message is the backlog an
    operator (and an autoscaler) watches; Celery's messages carry no such time of their own."""
    if headers is not None:
        headers.setdefault(QUEUED_AT_HEADER, round(time.time(), 3))


_bound: dict[str, object] = {}


@task_prerun.connect
def bind_document(task_id=None, task=None, args=None, **_) -> None:
    """Every line logged while a stage runs says which document, version and task it is about."""
    fields = {"task_id": task_id, "task": getattr(task, "name", None)}
    if args and len(args) >= 3 and getattr(task, "name", "").startswith("situate."):
        fields.update(collection=args[0], doc_id=args[1], version=args[2])
    _bound[task_id] = logs.bind(**fields)


@task_postrun.connect
def unbind_document(task_id=None, **_) -> None:
    token = _bound.pop(task_id, None)
    if token is not None:
        try:
            logs.unbind(token)
        except ValueError:  # bound in another context (a thread pool's other thread): nothing to undo
            pass


@worker_init.connect
def preload_provider_sdks(**_) -> None:
    for variable, module in PRELOAD.items():
        if os.environ.get(variable):
            try:
                importlib.import_module(module)
            except ImportError:  # an optional extra not installed: the collection will say so
                pass
