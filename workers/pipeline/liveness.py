"""A worker's liveness, for a container's probe, without asking the worker anything.

The worker touches ``SITUATE_LIVENESS_FILE`` on each heartbeat (``delivery.Heartbeat``: a timer
in the consumer's own loop, so a stuck consumer stops touching it). ``python -m
workers.pipeline.liveness`` exits 0 while the file is younger than ``SITUATE_RECOVERY_S``, the
time after which the fleet takes the worker's messages anyway.

The common alternative, ``celery inspect ping``, broadcasts through the broker to every worker
and waits for replies: each probe costs every worker a message, and a slow broker turns into
failed probes and restart loops across the whole fleet. A file costs a ``stat``; a broker away
does not make it stale (the heartbeat's steps fail alone and the timer goes on), so a Redis
outage restarts nothing.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from workers.settings import get_settings

log = logging.getLogger(__name__)
_warned = False


def touch() -> None:
    global _warned
    path = get_settings().liveness_file
    if not path:
        return
    try:
        Path(path).touch()
    except OSError as e:
        if not _warned:  # once: a heartbeat every few seconds must not fill the log
            log.warning("liveness file %s: %s", path, e)
            _warned = True


def age_s(path: str, now: float | None = None) -> float | None:
    """Seconds since the worker last touched ``path``; None if it never did."""
    try:
        return (now or time.time()) - Path(path).stat().st_mtime
    except FileNotFoundError:
        return None


def main() -> int:
    settings = get_settings()
    if not settings.liveness_file:
        print("SITUATE_LIVENESS_FILE is not set: the worker writes no liveness file", file=sys.stderr)
        return 2
    age = age_s(settings.liveness_file)
    if age is None:
        print(f"{settings.liveness_file}: not written yet", file=sys.stderr)
        return 1
    if age > settings.recovery_s:
        print(f"{settings.liveness_file}: last heartbeat {age:.0f} s ago (> SITUATE_RECOVERY_S={settings.recovery_s:g})",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
