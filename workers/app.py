"""The Celery application: broker, serialization, delivery guarantees and queues.

Delivery is at least once (``acks_late``; a task whose worker dies is re-queued), so every
task is idempotent: deterministic ``_id``s, version-guarded state, checkpointed contexts.
JSON only: a pickle payload from the broker is code execution.

Queues: ``ingest`` (validate, chunk), ``situate.0 … situate.N-1`` (one document's chunks all
on one shard, chosen by a stable hash, so its prompt cache — or a local model's KV cache —
stays warm), ``index`` (embed, write).
"""

from __future__ import annotations

import importlib
import os

from celery import Celery
from celery.signals import worker_init

from workers.settings import get_settings

INGEST_QUEUE = "ingest"
INDEX_QUEUE = "index"


def situate_queue(shard: int) -> str:
    return f"situate.{shard}"


def all_queues() -> list[str]:
    return [INGEST_QUEUE] + [situate_queue(i) for i in range(get_settings().shards)] + [INDEX_QUEUE]


# Redis has no priority queue: Kombu keeps one list per priority level, "<queue>:<level>",
# level 0 (no suffix) first. Situate tasks use it to start big documents first (see tasks).
PRIORITY_STEPS = list(range(10))
PRIORITY_SEP = ":"


def situate_priority(chunks: int) -> int:
    """Longest first: a big document started last is the straggler that sets the run's end."""
    return max(0, 9 - max(0, chunks - 1).bit_length())


def queue_length(redis, queue: str) -> int:
    pipe = redis.pipeline(transaction=False)
    pipe.llen(queue)
    for level in PRIORITY_STEPS[1:]:
        pipe.llen(f"{queue}{PRIORITY_SEP}{level}")
    return sum(pipe.execute())


def make_app() -> Celery:
    s = get_settings()
    app = Celery("situate", broker=s.redis_url, include=["workers.tasks"])
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        event_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,  # state lives in ``status``; no result backend to fill up
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={"visibility_timeout": s.visibility_timeout_s,
                                  "priority_steps": PRIORITY_STEPS, "sep": PRIORITY_SEP,
                                  "queue_order_strategy": "priority"},
        broker_connection_retry_on_startup=True,
        task_time_limit=s.task_time_limit_s,
        task_soft_time_limit=s.task_time_limit_s - 60,
        task_default_queue=INGEST_QUEUE,
        task_routes={"situate.ingest": {"queue": INGEST_QUEUE}, "situate.index": {"queue": INDEX_QUEUE}},
        worker_send_task_events=True,  # for Flower
        task_send_sent_event=True,
        worker_hijack_root_logger=False,
    )
    return app


app = make_app()


# The provider SDKs a worker has credentials for, imported before it takes work: ``anthropic``
# alone takes ~3 s of CPU to import, which a fresh worker (several at once on 2 cores: much
# longer) would otherwise spend while its first documents wait.
PRELOAD = {"ANTHROPIC_API_KEY": "anthropic", "ANTHROPIC_AUTH_TOKEN": "anthropic", "VOYAGE_API_KEY": "voyageai",
           "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "boto3", "AWS_ACCESS_KEY_ID": "boto3", "AWS_PROFILE": "boto3"}


@worker_init.connect
def preload_provider_sdks(**_) -> None:
    for variable, module in PRELOAD.items():
        if os.environ.get(variable):
            try:
                importlib.import_module(module)
            except ImportError:  # an optional extra not installed: the collection will say so
                pass
