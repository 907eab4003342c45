"""The worker's consumer, made to outlive a failed clean-up of a lost broker connection.

When the broker connection breaks, Celery's consumer tidies the dead connection up and then
reconnects. Celery 5.7.0's tidying closes the Kombu connection after ``collect()`` has already
detached its transport; closing the channel then wants that transport to give back the messages
the worker held, and raises ``AttributeError`` ("'NoneType' object has no attribute 'hostname'").
Celery treats that as unrecoverable and the worker process exits: one worker in twelve in the
Redis failover fault test here, and on a fresh machine a failover run that stalled with every
document still queued, as it does when both of its workers are gone.

The same detached transport meets an acknowledgement that was queued on the event loop (acks
late: a task ended as the connection broke) and runs after the tidy-up: Kombu's ack then asks the
gone connection for a client, with the same ``AttributeError``, raised in the loop itself, which
ends the worker too (seen in the broker fault tests). That ack is logged and dropped
(``tolerant_ack``).

Nothing in that clean-up, nor in that acknowledgement, is needed to go on. The messages the worker held are in Kombu's
``unacked`` hash in Redis, where the heartbeat sweep gives them back within
``SITUATE_RECOVERY_S`` if this worker does not finish them. So a failed clean-up is logged and
the consumer reconnects as it would have. We keep Celery 5.7 for ``worker_state.scheduled_requests``
(the heartbeat keeps the messages of tasks waiting for a countdown; ``delivery``).
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable
from typing import Any

from celery.worker.consumer import Consumer
from kombu.message import Message

log = logging.getLogger("situate.consumer")


class SturdyConsumer(Consumer):  # type: ignore[misc]  # Celery ships no types
    def on_connection_error_after_connected(self, exc: Exception) -> None:
        try:
            super().on_connection_error_after_connected(exc)
        except Exception as e:  # noqa: BLE001 - any failure here would end the worker process
            log.warning("the lost broker connection could not be tidied up (%s: %s); reconnecting anyway: "
                        "the messages this worker held come back through the heartbeat sweep",
                        type(e).__name__, e)
            self.connection = None  # the next start makes a new one, as after a clean tidy-up

    def call_soon_ack(self, p: Any, *args: Any, **kwargs: Any) -> Any:
        return super().call_soon_ack(tolerant_ack(p), *args, **kwargs)


def tolerant_ack(ack: Any) -> Any:
    """``message.ack_log_error`` (or ``reject_log_error``) that logs an ``AttributeError`` from a
    connection torn down under it instead of raising it in the event loop. Still a bound method of
    the message under the same name: Celery's prefork pool runs exactly those at shutdown
    (``_is_ack_callback``), so that the acks of tasks that ended then are not lost."""
    message = getattr(ack, "__self__", None)
    if not isinstance(message, Message):
        return ack

    def tolerant(_message: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return ack(*args, **kwargs)
        except AttributeError as e:
            log.warning("a message could not be acknowledged on a lost broker connection (%s); the heartbeat "
                        "sweep gives it back and its stage, done already, is a no-op", e)
            return None

    tolerant.__name__ = getattr(ack, "__name__", "ack_log_error")
    bound: Callable[..., Any] = types.MethodType(tolerant, message)
    return bound
