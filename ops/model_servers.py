"""Model servers for tests and benchmarks, as real processes (``harness``'s way: a session each, a
log in ``.services/logs``): a fleet of OpenAI-compatible stand-in replicas
(``standins/openai_fleet.py``) and llama.cpp's own server on this machine's CPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from ops.harness import LOGS, ROOT, ProcessDied, _spawn, free_port, log_tail, stop


class OpenAIFleet:
    """Replicas of an OpenAI-compatible server (``ops/standins/openai_fleet.py``), a process each:
    ``urls`` is what ``SITUATE_OPENAI_BASE_URLS`` takes; a replica can be killed (its connections
    refused), started again (an empty cache) or stalled; ``lines`` reads every request they logged."""

    def __init__(self, n: int, config: dict[str, Any] | None = None):
        import httpx

        self.config = dict(config or {})
        self.ports = [free_port() for _ in range(n)]
        self.logs = [LOGS / f"replica-{port}.jsonl" for port in self.ports]
        for path in self.logs:
            path.unlink(missing_ok=True)
        self.procs: list[subprocess.Popen | None] = [None] * n
        self.http = httpx.Client(timeout=30)
        for i in range(n):
            self.start(i)

    @property
    def urls(self) -> str:
        return ",".join(self.url(i) for i in range(len(self.ports)))

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}/v1"

    def start(self, i: int) -> None:
        """Replica ``i`` (again, if it was killed: its cache starts empty)."""
        import httpx

        proc, log = _spawn([sys.executable, "-m", "ops.standins.openai_fleet", "--port", str(self.ports[i]),
                            "--name", f"r{i}", "--config", json.dumps(self.config), "--log", str(self.logs[i])],
                           f"replica-{self.ports[i]}-{uuid.uuid4().hex[:4]}", cwd=ROOT)
        self.procs[i] = proc
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise ProcessDied(f"replica {i} exited with {proc.returncode}:\n{log_tail(log)}")
            try:
                self.http.get(f"{self.url(i)}/models").raise_for_status()
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def kill(self, i: int) -> None:
        """SIGKILL: its requests in flight are lost, new connections refused."""
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        self.procs[i] = None

    def configure(self, i: int, **changes: Any) -> None:
        self.http.post(f"http://127.0.0.1:{self.ports[i]}/standin/config", json=changes).raise_for_status()

    def stats(self) -> list[dict[str, Any] | None]:
        out: list[dict[str, Any] | None] = []
        for i, port in enumerate(self.ports):
            try:
                out.append(self.http.get(f"http://127.0.0.1:{port}/standin/stats").json() if self.procs[i] else None)
            except Exception:  # noqa: BLE001 - a replica killed meanwhile
                out.append(None)
        return out

    def lines(self) -> list[dict[str, Any]]:
        from ops.standins.openai_fleet import read_log

        return read_log(self.logs)

    def close(self) -> None:
        for i in range(len(self.ports)):
            self.kill(i)
        self.http.close()


def llama_server_binary() -> Path | None:
    """llama.cpp's own server, built by ops/setup from the source llama-cpp-python vendors (with the
    ``llama`` extra), or ``SITUATE_LLAMA_SERVER``."""
    found = os.environ.get("SITUATE_LLAMA_SERVER") or str(Path(sys.executable).with_name("llama-server"))
    return Path(found) if Path(found).is_file() else None


class LlamaServers:
    """Replicas of llama.cpp's OpenAI-compatible server (``llama-server``) on this machine's CPU,
    one process each, serving one GGUF file; ``urls`` is what ``SITUATE_OPENAI_BASE_URLS`` takes.
    ``slots`` is each one's ``-np``, ``context`` its ``-c`` (shared by the slots); its prompt cache
    in memory (``--cache-ram``) keeps the prefixes of documents that take turns on a slot."""

    def __init__(self, model: Path, n: int = 2, slots: int = 2, context: int = 8192, threads: int = 1,
                 ready_timeout: float = 120, extra: list[str] | None = None):
        import httpx

        binary = llama_server_binary()
        if binary is None:
            raise FileNotFoundError("no llama-server: ops/setup builds it with the llama extra (ops/test does)")
        self.ports = [free_port() for _ in range(n)]
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        for port in self.ports:
            proc, log = _spawn([str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                                "-np", str(slots), "-c", str(context), "-t", str(threads), "--no-webui",
                                "--metrics", *(extra or [])], f"llama-server-{port}")
            self.procs.append(proc)
            self.logs.append(log)
        deadline = time.monotonic() + ready_timeout
        with httpx.Client(timeout=5) as http:
            for proc, port, log in zip(self.procs, self.ports, self.logs):
                while True:
                    if proc.poll() is not None:
                        raise ProcessDied(f"llama-server exited with {proc.returncode}:\n{log_tail(log)}")
                    try:
                        if http.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        self.close()
                        raise ProcessDied(f"llama-server not ready within {ready_timeout:.0f} s:\n{log_tail(log)}")
                    time.sleep(0.3)

    @property
    def urls(self) -> str:
        return ",".join(f"http://127.0.0.1:{port}/v1" for port in self.ports)

    def close(self) -> None:
        for proc in self.procs:
            stop(proc)
