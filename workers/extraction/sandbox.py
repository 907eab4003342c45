"""Extraction in a child process, under limits: a hostile or broken file fails alone, with a
reason, and the worker that asked lives on.

Parsers of PDF, Office and HTML files are big native and Python libraries fed untrusted bytes:
a decompression bomb, a pathological page, a parser bug can take all memory, spin forever or
crash the process. So a worker never parses itself. It writes the bytes to a private temporary
file and asks a child (``python -m workers.extraction.sandbox``) over a pipe, one JSON line each
way; the child runs under ``RLIMIT_AS`` (memory) and is killed past the time limit. A child that
dies, runs out of memory or times out is replaced for the next document; one that served many
documents is replaced too (memory fragmentation). The child is started once per worker process
and reused: starting Python and the parsers costs ~0.2 s, which a corpus of small files would
otherwise pay per file. A process with many threads (``--pool threads``) borrows from a few
children, one request each at a time (``Pool``).
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from workers.errors import ExtractionError
from workers.extraction.document import Extracted
from workers.extraction.limits import Limits

REUSE = 200  # documents one child serves before it is replaced
SUFFIXES = {"application/pdf": ".pdf", "text/html": ".html", "text/csv": ".csv",
            "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
            "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": ".xlsx"}


class Sandbox:
    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.served = 0

    def extract(self, data: bytes, media_type: str, name: str, limits: Limits) -> Extracted:
        # Some readers go by the name's suffix (openpyxl): the file gets its format's.
        suffix = SUFFIXES.get(media_type, "")
        with tempfile.NamedTemporaryFile(prefix="situate-extract-", suffix=suffix, delete=True) as f:
            f.write(data)
            f.flush()
            request = {"path": f.name, "media_type": media_type, "name": name, "limits": limits.to_json()}
            reply = self._ask(request, limits)
        if "error" in reply:
            raise ExtractionError(reply["error"])
        return Extracted.from_json(reply["extracted"])

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None or self.served >= REUSE:
            self.close()
            self.proc = subprocess.Popen([sys.executable, "-m", "workers.extraction.sandbox"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=None, close_fds=True)
            self.served = 0
        return self.proc

    def _ask(self, request: dict[str, Any], limits: Limits) -> dict[str, Any]:
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        self.served += 1
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except BrokenPipeError:
            return self._died(limits)
        reply = bytearray()
        deadline = time.monotonic() + limits.timeout_s + 5  # the child's own clock stops it first, normally
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while not reply.endswith(b"\n"):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    self.close()
                    raise ExtractionError(f"extraction took over {limits.timeout_s:.0f} s (SITUATE_EXTRACT_TIMEOUT_S)")
                chunk = os.read(proc.stdout.fileno(), 1 << 20)
                if not chunk:
                    return self._died(limits)
                reply += chunk
        answer: dict[str, Any] = json.loads(reply)
        return answer

    def _died(self, limits: Limits) -> dict[str, Any]:
        assert self.proc is not None
        code = self.proc.wait()
        self.proc = None
        if code == -signal.SIGKILL:
            return {"error": f"the extractor was killed (over {limits.memory_mb:,} MB of memory? "
                             "SITUATE_EXTRACT_MEMORY_MB)"}
        if code < 0:
            return {"error": f"the extractor crashed on this file (signal {-code}, {signal.Signals(-code).name})"}
        return {"error": f"the extractor stopped on this file (exit {code})"}

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None


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

    def extract(self, data: bytes, media_type: str, name: str, limits: Limits) -> Extracted:
        with self._slots:
            with self._lock:
                box = self._idle.pop() if self._idle else Sandbox()
            try:
                return box.extract(data, media_type, name, limits)
            finally:
                with self._lock:
                    self._idle.append(box)


_pool: Pool | None = None


def extract(data: bytes, media_type: str, name: str, limits: Limits) -> Extracted:
    """Extract in one of this process's sandbox children (started on first use). A forked
    process (Celery's prefork pool) never shares its parent's children: their pipes are the
    parent's."""
    global _pool
    if _pool is None or _pool.pid != os.getpid():
        _pool = Pool(max(1, os.cpu_count() or 1))
    return _pool.extract(data, media_type, name, limits)


# -- the child -------------------------------------------------------------------------------------

def _serve() -> None:
    from workers.extraction import formats

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash leaves no core file behind
    stdout = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        limits = Limits(**request["limits"])
        soft = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (soft, resource.getrlimit(resource.RLIMIT_AS)[1]))
        try:
            extracted = formats.extract(Path(request["path"]), request["media_type"], limits, request["name"])
            reply: dict[str, Any] = {"extracted": extracted.to_json()}
        except ExtractionError as e:
            reply = {"error": str(e)}
        except MemoryError:
            reply = {"error": f"the file needs more than {limits.memory_mb:,} MB to be read (SITUATE_EXTRACT_MEMORY_MB)"}
        except RecursionError:
            reply = {"error": "the file is nested too deeply to be read"}
        except Exception as e:  # noqa: BLE001 - any parser's failure on any file: this file fails, with its kind
            detail = str(e).replace(request["path"], request["name"] or "the file")[:200]
            reply = {"error": f"could not read the file ({type(e).__name__}: {detail})"}
        stdout.write(json.dumps(reply).encode() + b"\n")
        stdout.flush()


if __name__ == "__main__":
    _serve()
