"""Real processes for tests and benchmarks: Celery workers, the stand-in API, the HTTP API.

One set of helpers, used by ``tests/`` (through their conftest) and by ``ops/benchmarks/__main__.py``, so a
benchmark measures the same processes the tests check. Every process starts in its own
session (its whole tree is stopped with it), logs to ``.services/logs/<name>.log``, and is
waited for until it answers, or fails at once with its log's tail when it dies first.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / ".services" / "logs"
SITUATE = str(Path(sys.executable).with_name("situate"))


class ProcessDied(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _free_block(n: int, transport_offset: int = 100) -> int:
    """A first port such that it and the ``n - 1`` after it are free, and so are the same ports
    ``transport_offset`` higher (OpenSearch's transport ports, ``ops/opensearch/cluster``).

    Below the kernel's ephemeral range: a port found free there could be taken by any process's
    outgoing connection in the seconds before the JVM binds it (a cluster test failed so:
    "Failed to bind to 127.0.0.1:40012")."""
    highest = _ephemeral_start() - transport_offset - n - 1
    for _ in range(200):
        base = random.randint(max(1024, highest // 2), highest)
        ports = [base + i for i in range(n)] + [base + transport_offset + i for i in range(n)]
        try:
            with contextlib.ExitStack() as held:
                for port in ports:
                    s = held.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no block of free ports found")


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _spawn(args: list[str], name: str, env: dict[str, str] | None = None, cwd: Path | None = None
           ) -> tuple[subprocess.Popen, Path]:
    LOGS.mkdir(parents=True, exist_ok=True)
    path = LOGS / f"{name}.log"
    with open(path, "w") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **(env or {})}, cwd=cwd)
    return proc, path


def stop(proc: subprocess.Popen, timeout: float = 30) -> None:
    """SIGTERM to the process group (a worker's pool children too), SIGKILL if it lingers."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:  # not a group of its own (started without start_new_session)
        proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            proc.kill()
        proc.wait()


class Worker:
    """A real ``situate worker`` process (Celery, its pool children in its process group)."""

    def __init__(self, concurrency: int = 2, extra: list[str] | None = None, env: dict[str, str] | None = None,
                 name: str | None = None, ready_timeout: float = 90, prefix: list[str] | None = None):
        """``prefix``: what the command runs under (``ip netns exec NS``: a host of a fleet)."""
        self.name = name or f"worker-{uuid.uuid4().hex[:6]}"
        self.ended_on_purpose = False
        self.proc, self.log = _spawn([*(prefix or []), SITUATE, "worker", "--concurrency", str(concurrency), "--hostname",
                                      f"{self.name}@%h", "--loglevel", "INFO", *(extra or [])], self.name, env)
        deadline = time.monotonic() + ready_timeout
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise ProcessDied(f"worker exited with {self.proc.returncode}:\n{log_tail(self.log)}")
                # Celery says "<name>@<host> ready." once it consumes: read in its log rather than
                # asked over the broker, which a test may just have restarted under this process.
                if f"{self.name}@" in (text := self.log.read_text(errors="replace")) and " ready." in text:
                    return
                time.sleep(0.3)
            raise ProcessDied(f"worker not ready within {ready_timeout:.0f} s:\n{log_tail(self.log)}")
        except BaseException:  # never leave a worker behind, consuming the next test's messages
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exited_on_its_own(self) -> str | None:
        """Why this worker is gone when no one stopped or killed it (its exit code and its log's
        tail), or None: a worker must outlive every fault it meets (a broker lost, a pool child
        killed), never leave its messages to the others."""
        if self.ended_on_purpose or self.alive():
            return None
        return f"worker {self.name} exited with {self.proc.returncode}:\n{log_tail(self.log)}"

    def kill(self) -> None:
        """kill -9 of the worker and its pool children: a lost host, as far as Redis can tell."""
        self.ended_on_purpose = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def stop(self) -> None:
        self.ended_on_purpose = True
        stop(self.proc)


class StandIn:
    """The paid APIs' stand-in (``ops/standins/claude.py``) as a real HTTP server process."""

    def __init__(self, config: dict[str, Any] | None = None):
        import httpx

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.base_config = dict(config or {})
        self.proc, self.log = _spawn([sys.executable, "-m", "ops.standins.claude", "--port", str(self.port),
                                      "--config", json.dumps(self.base_config)], f"standin-{self.port}", cwd=ROOT)
        self.http = httpx.Client(base_url=self.url, timeout=30)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise ProcessDied(f"stand-in exited with {self.proc.returncode}:\n{log_tail(self.log)}")
            try:
                self.http.get("/standin/stats")
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def configure(self, **changes: Any) -> None:
        """Set stand-in options (the others back to this process's base config); resets its cache
        and counters."""
        from ops.standins.claude import Config

        self.http.post("/standin/config", json={**asdict(Config()), **self.base_config, **changes}).raise_for_status()

    def update(self, **changes: Any) -> None:
        """Change some options, keep the others as they are now; resets cache and counters."""
        self.http.post("/standin/config", json=changes).raise_for_status()

    def stats(self, times: bool = False) -> dict[str, Any]:
        return self.http.get("/standin/stats", params={"times": "true"} if times else None).json()

    def in_flight_during(self, start: float, end: float) -> int:
        """Billed calls that were in flight at some moment between two wall-clock times: the
        calls a fault in that window could make us pay twice."""
        return self.http.get("/standin/stats", params={"overlapping": f"{start},{end}"}).json()["overlapping"]

    def close(self) -> None:
        self.http.close()
        stop(self.proc)


class FaultyProxy:
    """``faultproxy.py`` in front of ``upstream`` (``http://host:port``), cutting a share of its
    requests (``faults``: p_drop, p_reset, p_stall, stall_s); ``url`` to point a client at, ``stats``
    what it cut."""

    def __init__(self, upstream: str, faults: dict[str, Any]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.stats_file = LOGS / f"faultproxy-{self.port}.json"
        LOGS.mkdir(parents=True, exist_ok=True)
        self.stats_file.unlink(missing_ok=True)
        self.proc, self.log = _spawn([sys.executable, "-m", "ops.fleet.faultproxy", "--upstream",
                                      upstream.split("://", 1)[-1], "--port", str(self.port), "--faults",
                                      json.dumps(faults), "--stats", str(self.stats_file)], f"faultproxy-{self.port}",
                                     cwd=ROOT)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise ProcessDied(f"fault proxy exited with {self.proc.returncode}:\n{log_tail(self.log)}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stats(self) -> dict[str, int]:
        try:
            return json.loads(self.stats_file.read_text())
        except (OSError, ValueError):
            return {}

    def close(self) -> None:
        stop(self.proc)


class Api:
    """A real ``situate api`` (uvicorn) on a free port."""

    def __init__(self, env: dict[str, str] | None = None, ready_timeout: float = 60, host: str = "127.0.0.1",
                 prefix: list[str] | None = None):
        """``host``: the address it listens on (off loopback it needs SITUATE_API_TOKEN);
        ``prefix``: what it runs under (``ip netns exec NS``: a fleet's host)."""
        import httpx

        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        self.proc, self.log = _spawn([*(prefix or []), SITUATE, "api", "--host", host, "--port", str(self.port)],
                                     f"api-{self.port}", env)
        deadline = time.monotonic() + ready_timeout
        while True:
            if self.proc.poll() is not None:
                raise ProcessDied(f"api exited with {self.proc.returncode}:\n{log_tail(self.log)}")
            try:
                if httpx.get(f"{self.url}/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ProcessDied(f"api did not answer within {ready_timeout:.0f} s:\n{log_tail(self.log)}")
            time.sleep(0.2)

    def stop(self) -> None:
        stop(self.proc)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


# -- services of a test's own: stopped, restarted and killed without touching ops/up's -------


class RedisServer:
    """A private ``redis-server`` on a free port, configured as ops/up configures the shared one
    (append-only file, noeviction). ``stop`` is a graceful SHUTDOWN and ``start`` brings the same
    data back: a Redis restart, without stopping the Redis every other test (and process) uses."""

    def __init__(self, folder: Path):
        self.folder, self.port = Path(folder), free_port()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.start()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def cli(self, *args: str) -> str:
        return subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True,
                              timeout=30).stdout.strip()

    def start(self) -> None:
        self.proc, log = _spawn(["redis-server", "--bind", "127.0.0.1", "--port", str(self.port),
                                 "--dir", str(self.folder), "--appendonly", "yes", "--save", "",
                                 "--maxmemory-policy", "noeviction"],
                                f"redis-{self.port}")
        deadline = time.monotonic() + 60
        while self.cli("ping") != "PONG":  # not "LOADING": the append-only file is read back
            if self.proc.poll() is not None:
                raise ProcessDied(f"redis-server exited with {self.proc.returncode}:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                raise ProcessDied(f"redis-server not ready:\n{log_tail(log)}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.cli("shutdown")  # writes the append-only file out, then exits
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                stop(self.proc)


OPENSEARCH_NODES = ROOT / "ops" / "opensearch" / "cluster"


class OpenSearchNodes:
    """OpenSearch nodes of a private cluster (``ops/opensearch/cluster``, from ops/up's install),
    one or several, on ports of their own (free ones when not given: two test processes may start
    clusters at once). ``stop`` then ``start`` is a restart that keeps the data; ``kill`` is a lost
    host. About 20 s of start-up per node on 2 cores."""

    def __init__(self, name: str, nodes: int, http_port: int | None = None):
        self.name, self.nodes, self.http_port = name, nodes, http_port or _free_block(nodes)
        self.run("stop", "--purge")  # a previous run's leftovers
        self.urls = ""
        self.start()

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run([str(OPENSEARCH_NODES), args[0], self.name, *args[1:]], capture_output=True,
                              text=True, timeout=timeout)

    def start(self) -> None:
        started = self.run("start", str(self.nodes), str(self.http_port))
        if started.returncode != 0:
            raise ProcessDied(f"OpenSearch nodes {self.name} did not start:\n{started.stderr[-3000:]}")
        self.urls = started.stdout.strip().splitlines()[-1]

    def stop(self) -> None:
        self.run("stop")

    def kill(self, node: int) -> None:
        self.run("kill", str(node))

    def purge(self) -> None:
        self.run("stop", "--purge", timeout=120)
