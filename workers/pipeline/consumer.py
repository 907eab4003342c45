"""The worker's consumer, made to outlive a failed clean-up of a lost broker connection.

When the broker connection breaks, Celery's consumer tidies the dead connection up and then
reconnects. Celery 5.7.0's tidying closes the Kombu connection after ``collect()`` has already
detached its transport; closing the channel then wants that transport to give back the messages
the worker held, and raises ``AttributeError`` ("'NoneType' object has no attribute 'hostname'").
Celery treats that as unrecoverable and the worker process exits: one worker in twelve in the
Redis failover fault test here, and on a fresh machine a failover run that stalled with every
document still queued, as it does when both of its workers are gone.

Nothing in that clean-up is needed to go on. The messages the worker held are in Kombu's
``unacked`` hash in Redis, where the heartbeat sweep gives them back within
``SITUATE_RECOVERY_S`` if this worker does not finish them. So a failed clean-up is logged and
the consumer reconnects as it would have. We keep Celery 5.7 for ``worker_state.scheduled_requests``
(the heartbeat keeps the messages of tasks waiting for a countdown; ``delivery``).
"""

from __future__ import annotations

import logging

from celery.worker.consumer import Consumer

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
