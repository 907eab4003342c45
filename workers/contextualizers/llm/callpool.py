"""A worker process's threads for LLM calls: how many are in flight, and which goes first."""

from __future__ import annotations

import contextvars
import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from workers.settings import get_settings


class CallPool:
    """The per-process bound on calls in flight, served by priority, then in order.

    A document's first call goes ahead of other documents' fan-out calls: nothing else of its
    document can start before that call's response does, so a FIFO pool that queues it behind
    fan-outs (a busy worker holds many documents) starts documents late, and the last ones to
    start make the run's long tail while the other workers idle.
    """

    FIRST, REST = 0, 1

    def __init__(self, size: int):
        self._queue: queue.PriorityQueue[Any] = queue.PriorityQueue()
        self._order = itertools.count()  # ties: in order of submission (never compares futures)
        for i in range(size):
            threading.Thread(target=self._serve, name=f"llm-{i}", daemon=True).start()

    def submit(self, priority: int, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Runs ``fn(*args)`` in the caller's context (its log fields: which document)."""
        future: Future[Any] = Future()
        context = contextvars.copy_context()
        self._queue.put((priority, next(self._order), future, lambda: context.run(fn, *args), ()))
        return future

    def _serve(self) -> None:
        while True:
            _, _, future, fn, args = self._queue.get()
            if not future.set_running_or_notify_cancel():  # cancelled while queued
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as e:  # handed to whoever waits on the future
                future.set_exception(e)


_pool_lock = threading.Lock()
_pool: CallPool | None = None


def worker_pool() -> CallPool:
    """One pool per process: its size is the per-worker bound on calls in flight."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = CallPool(get_settings().llm_concurrency)
        return _pool
