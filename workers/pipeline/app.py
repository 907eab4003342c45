"""The workers' Celery application: what ``sending`` shares with producers, plus delivery.

Delivery is at least once (``acks_late``; a task whose worker dies is delivered again, within
``SITUATE_RECOVERY_S`` thanks to the workers' heartbeat: ``delivery``), so every task is
idempotent: version-guarded state that only moves forward, checkpointed contexts, per-version
chunk ids, and a lease so that one delivery at a time works on a unit. The tasks are in
``tasks``; this module also hooks the worker's signals (logs bound to a document, the fair gate
topped up after every task, provider SDKs imported before the first one). Producers never import
it: they send by name through ``sending``.
"""

from __future__ import annotations

import contextvars
import importlib
import logging
from typing import Any

from celery import Celery
from celery.signals import setup_logging, task_postrun, task_prerun, worker_init

from workers import logs
from workers.contextualizers import registry
from workers.contextualizers.llm import replicas
from workers.errors import PluginError
from workers.pipeline import delivery, fair, rebuild, sending
from workers.pipeline.delivery import Heartbeat
from workers.settings import get_credentials, get_settings
from workers.storage import compaction

log = logging.getLogger("situate.app")


def make_app() -> Celery:
    s = get_settings()
    app = sending.configure(Celery("situate", include=["workers.pipeline.tasks"]))
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=s.task_time_limit_s,
        task_soft_time_limit=s.task_time_limit_s - 60,
        # Task events (three PUBLISHes a task, from the worker's main process) only once someone
        # watches: Flower turns them on (its enable_events, every few seconds) when it starts.
        worker_send_task_events=False,
        worker_hijack_root_logger=False,
        worker_consumer="workers.pipeline.consumer:SturdyConsumer",  # outlives a lost broker (consumer.py)
    )
    app.steps["consumer"].add(Heartbeat)
    return app


app = make_app()
sending.install(app)
delivery.on_heartbeat.append(rebuild.advance)  # reindexes move on every heartbeat (one worker by lease)
delivery.on_heartbeat.append(replicas.probe_due)  # replicas of your own servers: listed, probed if down, retired
delivery.on_heartbeat.append(compaction.maybe_compact_idle)  # idle indices merged into few segments
# The gate is topped up as each message is received (``delivery``: the room it left in its queue),
# and on every heartbeat, the net for whatever that missed.
delivery.on_heartbeat.append(fair.admit_and_sweep)


# The provider SDKs a worker has credentials for, imported before it takes work: ``anthropic``
# alone takes ~3 s of CPU to import, which a fresh worker (several at once on 2 cores: much
# longer) would otherwise spend while its first documents wait.
PRELOAD = {"anthropic_api_key": "anthropic", "anthropic_auth_token": "anthropic", "voyage_api_key": "voyageai",
           "aws_endpoint_url_bedrock_runtime": "boto3", "aws_access_key_id": "boto3", "aws_profile": "boto3"}


@setup_logging.connect
def json_logs(loglevel: str | int | None = None, **_: Any) -> None:
    """Celery leaves logging to us when this signal has a receiver: JSON lines, no secrets."""
    logs.configure(loglevel if isinstance(loglevel, str) else logging.getLevelName(loglevel or logging.INFO))


_bound: dict[str | None, contextvars.Token[dict[str, Any]]] = {}


@task_prerun.connect
def bind_document(task_id: str | None = None, task: Any = None, args: Any = None, **_: Any) -> None:
    """Every line logged while a stage runs says which document, version and task it is about."""
    fields = {"task_id": task_id, "task": getattr(task, "name", None)}
    if args and len(args) >= 3 and getattr(task, "name", "").startswith("situate."):
        fields.update(collection=args[0], doc_id=args[1], version=args[2])
    _bound[task_id] = logs.bind(**fields)


@task_postrun.connect
def unbind_document(task_id: str | None = None, **_: Any) -> None:
    token = _bound.pop(task_id, None)
    if token is not None:
        try:
            logs.unbind(token)
        except ValueError:  # bound in another context (a thread pool's other thread): nothing to undo
            pass


@worker_init.connect
def preload_provider_sdks(**_: Any) -> None:
    try:
        registry.load_plugins()
    except PluginError as e:
        # Celery logs and swallows an Exception raised by a signal's receiver, and the worker would
        # go on taking documents it cannot situate: SystemExit is not swallowed.
        log.critical("%s", e)
        raise SystemExit(f"situate worker: {e}") from None
    credentials = get_credentials()
    wanted = [module for name, module in PRELOAD.items() if getattr(credentials, name)]
    if get_settings().openai_base_urls:
        # Also a matter of correctness: threads that import the SDK for the first time at once (a
        # threads pool's first slices) met "partially initialized module 'httpx'", which Python's
        # import locks hand out rather than deadlock.
        wanted.append("openai")
    for module in wanted:
        try:
            importlib.import_module(module)
        except ImportError:  # an optional extra not installed: the collection will say so
            pass
