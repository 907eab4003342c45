"""The base of every stage task, and the Redis records that make a delivery safe to repeat.

Celery on Redis delivers a message again when the process running it dies (a pool child that
segfaults, a worker killed with -9, a lost host), and it can deliver one twice. The worker side
of this is ``delivery`` (counting, leases, the heartbeat); this module holds what both sides
share — the unit of work a task holds (its leases and delivery counters are kept in
``storage.deliveries``) — and the task base class: transient faults retried in place with
backoff, anything else failing the document (and the document alone) with a reason that names
the stage.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from celery import Task
from kombu.exceptions import OperationalError

from workers import faults, keys, metrics
from workers.errors import failure_reason
from workers.pipeline import bundling, fair
from workers.pipeline.sending import BUNDLE_TASKS
from workers.storage import states

log = logging.getLogger("situate.tasks")

# A store away, for the delivery code's except clauses: ``faults.is_store_fault`` as a tuple (the
# broker's error by its class: this module imports Celery anyway). A provider's fault never comes
# here: its call waited it out already.
TRANSIENT: tuple[type[BaseException], ...] = (*faults.STORE_FAULTS, OperationalError)


def unit_of(task_name: str, args: Sequence[Any]) -> str | None:
    """The lease key of the unit of work a stage task holds: its document version and stage
    (a slice of a big document: its first chunk too). None for any other task."""
    if not task_name.startswith("situate.") or len(args) < 3:
        return None
    collection, doc_id, version = args[:3]
    stage = task_name.split(".", 1)[1]
    if task_name in BUNDLE_TASKS:  # (collection, bundle id, its documents)
        return keys.lease(collection, "bundle", doc_id, stage)
    if stage == "collect_bundle":  # (collection, bundle id, its pool's stage): a bundle's own id
        return None
    if stage == "contextualize_slice" and len(args) > 3 and args[3]:
        stage = f"slice:{min(args[3])}"
    elif stage in ("poll_batch", "situate", "situate_slice"):  # one unit with contextualize
        stage = "contextualize" if stage != "situate_slice" else f"slice:{min(args[3])}"
    elif stage == "ingest":
        stage = "chunk"
    return keys.lease(collection, version, doc_id, stage)


def fail_document(task_name: str, args: Sequence[Any], reason: str) -> None:
    """A stage's document failed with ``reason``; a bundle's documents each sent on alone instead,
    as its failure cannot be pinned on one of them (``bundling``)."""
    if task_name in BUNDLE_TASKS:
        log.warning("bundle %s of %s: %s; its %d documents sent on alone", args[1], args[0], reason,
                    len(bundling.members_of(args)))
        bundling.split(fair, task_name, args)
        return
    collection, doc_id, version = args[:3]
    log.error("document %s/%s failed: %s", collection, doc_id, reason)
    states.set_state(collection, doc_id, version, states.FAILED, error=reason[:2000])


class PipelineTask(Task):
    """A store's transient faults are waited out here, in place (``faults.retrying_stores``) — not with Celery's retry,
    which publishes a new message: when the fault is the broker itself, that publish fails,
    Celery rejects the message, and the document would be lost. In place, the message stays
    held (the heartbeat keeps it) and the stage, idempotent, simply runs again."""

    # Counts deliveries, holds the lease, records how a process died: in the worker's parent.
    Request = "workers.pipeline.delivery:GuardedRequest"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        outcome = "failed"
        try:
            result = self._run_patiently(*args, **kwargs)
            outcome = "done"
            return result
        finally:
            metrics.observe("stage_seconds", time.monotonic() - started, stage=self.name.split(".", 1)[1],
                            outcome=outcome)

    def _run_patiently(self, *args: Any, **kwargs: Any) -> Any:
        for attempt in faults.retrying_stores(self.name.split(".", 1)[1], str(tuple(args[:3]))):
            with attempt:
                return self.run(*args, **kwargs)
        raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

    def on_failure(self, exc: BaseException, task_id: str, args: Sequence[Any], kwargs: dict[str, Any],
                   einfo: Any) -> None:
        if len(args) < 3:
            return
        try:
            fail_document(self.name, args, failure_reason(self.name.split(".", 1)[1], exc, task_id))
        except Exception:  # Redis itself gone: the message is delivered again later anyway
            log.exception("could not record the failure of %s", args[:3])
