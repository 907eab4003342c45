"""Extraction in a child process that holds nothing worth stealing: a hostile or broken file
fails alone, with a reason, and neither the worker that asked nor another tenant's file is
touched.

Parsers of PDF, Office and HTML files are big native and Python libraries fed untrusted bytes: a
decompression bomb, a pathological page, a parser bug can take all memory, spin, crash, print, or
worse. So a worker never parses itself. It sends the file's bytes to a child
(``workers.extraction.child``) on a pipe of their own, as length-prefixed frames (``frames``),
each request carrying an id that its reply must repeat; the child's stdout goes nowhere and its
stderr to the worker's log, so what a library prints never reaches the reply channel. A reply for
another id, a frame over the reply budget, a dead or silent child: that child is killed, and the
next file gets a new one. No file's text or error can reach another request.

The child starts with an environment of its own (no credentials, no service URLs), under hard
limits it cannot raise (address space, CPU seconds, open files, file size: it writes nothing but
its replies), in a network namespace of its own where the platform allows one, and as ``nobody``
when the worker runs as root; ``isolation()`` says what held on this machine (docs/reliability.md).

A child is started once per worker process and reused: starting Python and the parsers is the
cost of a small file many times over, which a corpus of small files would otherwise pay per file. It is replaced after
``REUSE`` files (memory fragmentation), before its lifetime CPU limit could cut a file short, and
when a request asks for other limits than it was started with (hard limits only go down). A
``--pool threads`` worker borrows from a few children, one request each at a time (``Pool``).
"""

from __future__ import annotations

import base64
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from workers.errors import ExtractionError
from workers.extraction import formats, frames
from workers.extraction.document import Extracted
from workers.extraction.limits import Limits

CHILD = [sys.executable, "-m", "workers.extraction.child"]  # then: its two pipes, memory MB, lifetime CPU s
REUSE = 200  # files one child serves before it is replaced
log = logging.getLogger("situate.extraction")
LIFETIME_CPU_S = 3600  # a child's hard CPU limit: replaced before a file could meet it
START_TIMEOUT_S = 60.0
# What a child's environment holds: enough for Python to start and find this package; nothing of
# the worker's (API keys, the Redis URL and its password, cloud credentials).
CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
             "PYTHONPATH": formats.PACKAGE_ROOT, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
             "PYTHONHASHSEED": "random"}


class Sandbox:
    """One child and the two pipes to it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.requests = self.replies = -1
        self.limits: Limits | None = None  # what the running child was started under
        self.served = 0
        self.cpu_s = 0.0
        self.isolation: dict[str, Any] = {}

    def extract(self, data: bytes | bytearray, media_type: str, name: str, limits: Limits) -> Extracted:
        reply = self._ask({"media_type": media_type, "name": name, "limits": limits.to_json()}, data, limits)
        if "error" in reply:
            raise ExtractionError(str(reply["error"]))
        return Extracted.from_json(reply["extracted"])

    def render(self, data: bytes, page: int, dpi: int, lines: list[str], limits: Limits) -> tuple[bytes, int]:
        """A PDF page as PNG bytes, ``lines`` marked on it (``render.page_png``); and how many were found."""
        reply = self._ask({"render": {"page": page, "dpi": dpi, "lines": lines}, "limits": limits.to_json()}, data, limits)
        if "error" in reply:
            raise ExtractionError(str(reply["error"]))
        return base64.b64decode(reply["png"]), int(reply.get("found") or 0)

    def probe(self, limits: Limits | None = None) -> dict[str, Any]:
        """What the child sees of its world (environment names, limits, user, network): for the
        worker's start-up log and the tests, which check that it holds nothing."""
        return self._ask({"probe": True}, b"", limits or Limits())["probe"]

    # -- the conversation -------------------------------------------------------------------------

    def _ask(self, header: dict[str, Any], data: bytes | bytearray, limits: Limits) -> dict[str, Any]:
        self._start(limits)
        request_id = uuid.uuid4().hex
        deadline = time.monotonic() + limits.timeout_s + 5  # the child's own budget stops it first
        self.served += 1
        try:
            frames.write(self.requests, json.dumps({**header, "id": request_id}).encode(), deadline)
            frames.write(self.requests, data, deadline)
            raw = frames.read(self.replies, limits.reply_bytes(), deadline)
        except TimeoutError:
            self.close()
            raise ExtractionError(f"extraction took over {limits.timeout_s:.0f} s (SITUATE_EXTRACT_TIMEOUT_S)") from None
        except (EOFError, frames.FrameError) as e:
            return self._ended(limits, e)
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or reply.get("id") != request_id:
            self.close()  # out of step: nothing more this child says can be trusted
            raise ExtractionError("the extractor answered out of turn; it was replaced")
        self.cpu_s = float(reply.get("cpu_s") or 0.0)
        return reply

    def _start(self, limits: Limits) -> None:
        alive = self.proc is not None and self.proc.poll() is None
        if alive and self.served < REUSE and self.limits == limits and self.cpu_s + limits.timeout_s < LIFETIME_CPU_S:
            return
        self.close()
        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        try:
            self.proc = subprocess.Popen(
                [*CHILD, str(requests_read), str(replies_write), str(limits.memory_mb), str(LIFETIME_CPU_S)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=None, env=CHILD_ENV,
                pass_fds=(requests_read, replies_write), close_fds=True, start_new_session=True)
        finally:
            os.close(requests_read)
            os.close(replies_write)
        self.requests, self.replies = requests_write, replies_read
        for fd in (self.requests, self.replies):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self.limits, self.served, self.cpu_s = limits, 0, 0.0
        try:
            hello = json.loads(frames.read(self.replies, 1 << 16, time.monotonic() + START_TIMEOUT_S))
        except (TimeoutError, EOFError, frames.FrameError, ValueError):
            self.close()
            raise ExtractionError("the extractor could not start (see the worker's log)") from None
        self.isolation = hello.get("isolation") or {}
        global _said
        if not _said:  # once per process: what holds on this machine (docs/reliability.md, "Security")
            _said = True
            log.info("extraction child isolation: network %s, user %s, environment %s",
                     self.isolation.get("network"), self.isolation.get("user"), self.isolation.get("environment"))

    def _ended(self, limits: Limits, cause: Exception) -> dict[str, Any]:
        """The child hung up, or sent what no reply is: why, as the document's reason."""
        assert self.proc is not None
        if self.proc.poll() is None:  # alive but out of protocol (a frame over the reply budget)
            self.close()
            raise ExtractionError(f"the extractor's answer broke the protocol ({cause}); it was replaced")
        code = self.proc.wait()
        self.close()
        if code == -signal.SIGXCPU:
            raise ExtractionError(f"the file took more CPU than its pages allow ({limits.cpu_base_s:.0f} s + "
                                  f"{limits.cpu_per_page_s:g} s a page, SITUATE_EXTRACT_CPU_S_PER_PAGE)")
        if code == -signal.SIGKILL:
            raise ExtractionError(f"the extractor was killed (over {limits.memory_mb:,} MB of memory? "
                                  "SITUATE_EXTRACT_MEMORY_MB)")
        if code < 0:
            raise ExtractionError(f"the extractor crashed on this file (signal {-code}, {signal.Signals(-code).name})")
        raise ExtractionError(f"the extractor stopped on this file (exit {code})")

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None
        for fd in (self.requests, self.replies):
            if fd >= 0:
                os.close(fd)
        self.requests = self.replies = -1


class Pool:
    """The sandboxes of one worker process. A child serves one request at a time, and a
    ``--pool threads`` worker runs many chunk tasks at once: each borrows an idle child (or
    starts one), at most ``size`` at once, which bounds the memory children may take to
    ``size`` x ``SITUATE_EXTRACT_MEMORY_MB``. A prefork worker's process uses one."""

    def __init__(self, size: int):
        self.size = size
        self.pid = os.getpid()
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[Sandbox] = []
        self._lock = threading.Lock()

    def run(self, ask: Any) -> Any:
        with self._slots:
            with self._lock:
                box = self._idle.pop() if self._idle else Sandbox()
            try:
                return ask(box)
            finally:
                with self._lock:
                    self._idle.append(box)


_pool: Pool | None = None
_said = False


def _this_process_pool() -> Pool:
    """This process's sandboxes (started on first use). A forked process (Celery's prefork pool)
    never shares its parent's children: their pipes are the parent's."""
    global _pool
    if _pool is None or _pool.pid != os.getpid():
        _pool = Pool(max(1, os.cpu_count() or 1))
    return _pool


def extract(data: bytes | bytearray, media_type: str, name: str, limits: Limits) -> Extracted:
    """Extract in one of this process's sandbox children."""
    extracted: Extracted = _this_process_pool().run(lambda box: box.extract(data, media_type, name, limits))
    return extracted


def render(data: bytes, page: int, dpi: int, lines: list[str], limits: Limits) -> tuple[bytes, int]:
    """Draw a PDF page in one of this process's sandbox children (``Sandbox.render``)."""
    drawn: tuple[bytes, int] = _this_process_pool().run(lambda box: box.render(data, page, dpi, lines, limits))
    return drawn


def isolation(limits: Limits | None = None) -> dict[str, Any]:
    """What a child of this process holds and may do (``Sandbox.probe``)."""
    probed: dict[str, Any] = _this_process_pool().run(lambda box: box.probe(limits))
    return probed
