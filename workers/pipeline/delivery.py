"""The worker's side of at-least-once delivery: what its parent process does around each task.

Every delivery of a stage task, before it is handed to the pool (``GuardedRequest``):

1. **One delivery at a time holds the unit of work** — (collection, document, version, stage),
   or one slice of a big document — through a lease in Redis (``guard``). A delivery that finds
   the lease held by a live one defers itself: the same message again, later. When that one
   ends, the copy finds its stage done, a no-op. So a task that runs long never runs twice.
2. **Deliveries that start work are counted** per message. A message whose process died
   ``SITUATE_MAX_DELIVERIES`` times is poison: its document fails with the reason and the
   message is acknowledged, instead of being delivered again without end. Only a death the work
   could have caused counts — a crash (SIGSEGV, SIGABRT), a kill for memory or past the time
   limit (SIGKILL) — not a stop sent from outside (SIGTERM, SIGINT, SIGHUP, SIGQUIT: systemd's
   ``KillMode=control-group`` sends SIGTERM to every process of a worker at once). A bundle's
   message whose process died once is split into its documents' own messages instead
   (``bundling``): the poison is then found among them, alone.
3. When a pool child dies (a segfault in a native library, the OOM killer), the parent records
   how, frees the lease at once, and lets Celery put the message back.

**Recovery in seconds** (``Heartbeat``): Kombu keeps each delivered, unacknowledged message in
the ``unacked`` hash with its delivery time in ``unacked_index``, and any live worker gives back
those older than the visibility timeout. Every ``heartbeat_s`` a worker moves the time of each
message it holds to now and renews its leases. A dead worker's messages stop moving: they are
back in their queues within ``SITUATE_RECOVERY_S``, while a live worker's long task is never
taken from it, however long it runs — and the visibility timeout can be a minute, not an hour.
"""

from __future__ import annotations

import logging
import re
import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

from billiard.exceptions import WorkerLostError
from celery import bootsteps
from celery.worker import state as worker_state
from celery.worker.request import Request

from workers.pipeline import bundling, fair, guard, liveness, presence
from workers.pipeline.sending import BUNDLE_TASKS
from workers.settings import get_settings
from workers.storage import broker, deliveries, states

log = logging.getLogger("situate.delivery")

# Called on every heartbeat of a worker, after its own duties (``fair`` tops the queues up here).
on_heartbeat: list[Callable[[], object]] = []


class GuardedRequest(Request):
    """A task delivery as the worker's parent process sees it.

    Celery builds the class it really uses as a subclass of this one, per task, and that
    subclass defines its own ``execute_using_pool`` and ``on_success`` without calling ours;
    ``__init_subclass__`` wraps them, so the guard runs whatever Celery generates."""

    lease: tuple[str, str] | None = None  # (key, holder) while this delivery holds its unit

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        execute, succeeded = cls.__dict__.get("execute_using_pool"), cls.__dict__.get("on_success")
        if execute is not None:
            def execute_using_pool(self: GuardedRequest, pool: Any, **kw: Any) -> Any:
                return self._guarded(lambda: execute(self, pool, **kw), pool)
            cls.execute_using_pool = execute_using_pool  # type: ignore[method-assign]  # wrapping Celery's
        if succeeded is not None:
            def on_success(self: GuardedRequest, failed__retval__runtime: Any, **kw: Any) -> Any:
                self._release()
                return succeeded(self, failed__retval__runtime, **kw)
            cls.on_success = on_success  # type: ignore[method-assign]  # wrapping Celery's

    def execute_using_pool(self, pool: Any, **kwargs: Any) -> Any:
        return self._guarded(lambda: super(GuardedRequest, self).execute_using_pool(pool, **kwargs), pool)

    def _guarded(self, execute: Callable[[], Any], pool: Any) -> Any:
        # Received: Kombu holds it as unacknowledged now, the fair gate need not (storage.fairqueue);
        # and its unit's lease taken and the delivery counted — one round trip for the three, as
        # this process waits on each in turn for every message (over a network, milliseconds).
        unit = guard.unit_of(self.name, self.args)
        retries = self.request_dict.get("retries") or 0
        holder = f"{self.id}:{uuid.uuid4().hex[:8]}"
        queue = (self.delivery_info or {}).get("routing_key")
        document = states.member(self.args[0], self.args[1]) if len(self.args or ()) >= 2 else ""
        try:
            delivered, admitted = deliveries.begin(self.id, retries, unit, holder, queue,
                                                   (get_settings().queue_ahead, fair.stale_s()), document)
        except guard.TRANSIENT:
            if unit is not None:
                raise
            return execute()  # unconfirmed: parked again later and sent twice at worst, harmless
        try:  # the room this message left in its queue, filled from the fair gate
            fair.send_admitted(admitted)
        except guard.TRANSIENT as e:  # unsent: parked again after the stale time, the heartbeat admits
            log.warning("sending what the fair gate admitted: %s: %s", type(e).__name__, e)
        if unit is None:
            return execute()
        if not delivered:
            return self._finish_without_running(self._defer, pool)
        self.lease = (unit, holder)
        if delivered > 1 and self.name in BUNDLE_TASKS:  # its worker died: which document did it?
            return self._finish_without_running(
                lambda: guard.fail_document(self.name, self.args, "its worker died while running it"), pool)
        if delivered > get_settings().max_deliveries:
            return self._finish_without_running(lambda: self._poison(delivered - 1, retries), pool)
        return execute()

    def _finish_without_running(self, then: Callable[[], object], pool: Any) -> None:
        try:
            then()
        finally:
            self._release()
            self.acknowledge()
            worker_state.task_ready(self, successful=True)
            # The worker took a pool slot for this delivery (prefork: a semaphore the pool
            # gives back when a job ends). This one never reached the pool: give it back
            # here, or after `concurrency` deferrals the worker takes no more work at all
            # (found by ops/bench scale: a worker stalled with its pool idle).
            putlock = getattr(getattr(pool, "_pool", None), "_putlock", None)
            if putlock is not None:
                putlock.release()

    def _defer(self) -> None:
        s = get_settings()
        log.info("%s[%s] %s: held by another delivery; again in %ds", self.name, self.id, self.args[:3], s.lease_s)
        info = self.delivery_info or {}
        self.task.apply_async(self.args, self.kwargs, task_id=self.id, retries=self.request_dict.get("retries") or 0,
                              countdown=s.lease_s, queue=info.get("routing_key"), priority=info.get("priority"))

    def _poison(self, died: int, retries: int) -> None:
        how = deliveries.last_death(self.id, retries) or "no error seen: killed, out of memory, or its host lost"
        stage = self.name.split(".", 1)[1]
        guard.fail_document(self.name, self.args, f"{stage}: the worker process running it died {died} times "
                                                  f"(SITUATE_MAX_DELIVERIES); last: {how}")

    def _release(self) -> None:
        if self.lease:
            try:
                deliveries.release_lease(*self.lease)
            except guard.TRANSIENT:  # it lapses on its own
                pass
            self.lease = None

    def on_success(self, failed__retval__runtime: Any, **kwargs: Any) -> Any:
        self._release()
        return super().on_success(failed__retval__runtime, **kwargs)

    def on_failure(self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False) -> None:
        exc = exc_info.exception
        exc = getattr(exc, "exc", exc)  # billiard wraps it in ExceptionWithTraceback
        if isinstance(exc, WorkerLostError):
            retries = self.request_dict.get("retries") or 0
            try:
                if stopped_from_outside(str(exc)):
                    log.warning("%s[%s] %s: its process was stopped (%s); not counted against the document",
                                self.name, self.id, self.args[:3], exc)
                    deliveries.uncount(self.id, retries)
                else:
                    deliveries.record_death(self.id, retries, str(exc))
            except guard.TRANSIENT:
                pass
        self._release()
        return super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)


# Signals an operator, a service manager or a terminal sends to stop a process: the work did not
# cause them. SIGKILL is not among them: the kernel's OOM killer and the pool's hard time limit send it.
STOP_SIGNALS = {int(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)}
_SIGNAL = re.compile(r"signal (\d+)")


def stopped_from_outside(lost: str) -> bool:
    """``lost``: billiard's WorkerLostError text ("Worker exited prematurely: signal 15 (SIGTERM) Job: 3.")."""
    found = _SIGNAL.search(lost)
    return found is not None and int(found.group(1)) in STOP_SIGNALS


def heartbeat() -> None:
    """Keep what this worker holds: its messages invisible to the sweep, its leases alive, and
    their documents moving (the reconciler leaves a document alone while a live worker holds
    its message, waiting for a free slot or for its countdown, or running)."""
    held: dict[str, str] = {}
    tags: list[str] = []
    documents: set[str] = set()
    now = time.time()
    reserved = presence.copy_of(worker_state.reserved_requests)
    if reserved is None:
        return
    for request in reserved + (presence.copy_of(worker_state.scheduled_requests) or []):
        tag = getattr(request.message, "delivery_tag", None)
        if tag is not None:
            tags.append(tag)
        if getattr(request, "lease", None):
            key, holder = request.lease
            held[key] = holder
        args = request.args if isinstance(request.args, (list, tuple)) else ()
        if request.name in BUNDLE_TASKS:
            documents.update(states.member(args[0], m.doc_id) for m in bundling.members_of(args))
        elif request.name.startswith("situate.") and len(args) >= 2:
            documents.add(states.member(args[0], args[1]))
    # Each on its own: one refused (Redis away, or full) must not keep the others from trying.
    steps: tuple[tuple[str, Callable[[], None]], ...] = (("messages", lambda: broker.touch_unacked(tags, now)),
                                                        ("leases", lambda: deliveries.renew_leases(held)),
                                                        ("documents", lambda: states.touch(sorted(documents))))
    for what, step in steps:
        try:
            step()
        except guard.TRANSIENT as e:
            log.warning("heartbeat (%s): %s", what, e)


class Heartbeat(bootsteps.StartStopStep):
    """A timer in the worker's consumer that runs ``heartbeat`` every ``heartbeat_s``, and
    says the worker is online (``presence``)."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.tref: Any = None

    def start(self, c: Any) -> None:
        def beat() -> None:
            liveness.touch()
            heartbeat()
            try:
                presence.announce(c)
            except guard.TRANSIENT as e:
                log.warning("presence: %s", e)
            for duty in on_heartbeat:
                try:
                    duty()
                except Exception as e:  # noqa: BLE001 - a heartbeat duty must never stop the heartbeat
                    log.warning("heartbeat duty %s: %s: %s", getattr(duty, "__name__", duty), type(e).__name__, e)

        liveness.touch()
        try:  # online at once, not a heartbeat later
            presence.announce(c)
        except guard.TRANSIENT:
            pass
        self.tref = c.timer.call_repeatedly(get_settings().heartbeat_s, beat, priority=10)

    def stop(self, c: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
