"""A fleet of hosts on this machine: Redis, OpenSearch, the API and two worker hosts, each in a
network namespace of its own with an address of its own, and a network between them that can be
slowed down and cut (``ops/fleet/netlink.py``).

    10.45.0.1   this (root) namespace: the bridge, the network's relays, the stand-in Claude/Voyage
    10.45.0.2   redis     redis-server bound to its address
    10.45.0.3   search    an OpenSearch node (``ops/opensearch/cluster`` in the namespace)
    10.45.0.4   api       ``situate api``
    10.45.0.11  w1, .12 w2  worker hosts

A host reaches every service through the relay of its own route (``w1-redis``, ``w1-search``,
``w1-paid``: the paid APIs, which live outside the fleet as they do outside a team's network), so
one host's link to one service can be slowed or cut alone. Nothing is found on localhost: each
process is given addresses. The test process sits on the bridge and reaches Redis and OpenSearch
directly (an operator's view, never cut). Needs root and network namespaces (``ip netns``);
``available()`` says why not where they cannot be made.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from ops.harness import LOGS, ROOT, Api, ProcessDied, Worker, _spawn, log_tail, stop

NET = "10.45.0"
BRIDGE = "sitfl0"
HOSTS = {"redis": 2, "search": 3, "api": 4, "w1": 11, "w2": 12}
CLIENTS = ("api", "w1", "w2")
SERVICES = ("redis", "search", "paid")
OPENSEARCH = ROOT / "ops" / "opensearch" / "cluster"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def address(host: str) -> str:
    return f"{NET}.{HOSTS[host]}"


def namespace(host: str) -> str:
    return f"fl-{host}"


def available() -> str | None:
    """None where namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "the fleet needs root (network namespaces, veth pairs)"
    probe = f"fl-probe-{uuid.uuid4().hex[:4]}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode:
        return f"network namespaces cannot be made here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _free_ports(n: int) -> list[int]:
    ports = []
    for _ in range(n):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    return ports


class Fleet:
    """The namespaces, the services in them and the network; ``close`` takes all of it down."""

    def __init__(self, paid_url: str):
        """``paid_url``: the stand-in for Claude and Voyage (``http://127.0.0.1:PORT``)."""
        self.folder = Path(tempfile.mkdtemp(prefix="situate-fleet-"))
        self.cluster = f"fleet-{uuid.uuid4().hex[:6]}"
        self.procs: list[subprocess.Popen] = []
        self.workers: dict[str, list[Worker]] = {}
        self._down()  # a previous run's leftovers
        try:
            self._network()
            self.redis_url = f"redis://{address('redis')}:6379/0"
            self.opensearch_url = f"http://{address('search')}:9200"
            self._redis()
            self._relays(paid_url.rsplit(":", 1)[1])
            self._opensearch()
        except BaseException:
            self.close()
            raise

    # -- the network -------------------------------------------------------------------------

    def _network(self) -> None:
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{NET}.1/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for host in HOSTS:
            ns, outside, inside = namespace(host), f"sfl-{host}", f"sfl-{host}-n"
            _ip("netns", "add", ns)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", outside, "master", BRIDGE)
            _ip("link", "set", outside, "up")
            _ip("link", "set", inside, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{address(host)}/24", "dev", inside)
            _ip("-n", ns, "link", "set", inside, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def _relays(self, paid_port: str) -> None:
        upstream = {"redis": f"{address('redis')}:6379", "search": f"{address('search')}:9200",
                    "paid": f"127.0.0.1:{paid_port}"}
        ports = _free_ports(len(CLIENTS) * len(SERVICES) + 1)
        self.control_port = ports.pop()
        self.route_ports = {f"{h}-{s}": ports.pop() for h in CLIENTS for s in SERVICES}
        spec = {route: [f"{NET}.1:{port}", upstream[route.split("-", 1)[1]]] for route, port in self.route_ports.items()}
        proc, log = _spawn([sys.executable, "-m", "ops.fleet.netlink", "--routes", json.dumps(spec),
                            "--control", str(self.control_port)], f"{self.cluster}-netlink", cwd=ROOT)
        self.procs.append(proc)
        self._wait(lambda: "netlink ready" in log.read_text(errors="replace"), proc, log, "the network's relays")

    def endpoint(self, host: str, service: str) -> str:
        return f"{NET}.1:{self.route_ports[f'{host}-{service}']}"

    def env_of(self, host: str) -> dict[str, str]:
        """What a process on ``host`` is given: every service by its route's address."""
        paid = f"http://{self.endpoint(host, 'paid')}"
        return {"SITUATE_REDIS_URL": f"redis://{self.endpoint(host, 'redis')}/0",
                "SITUATE_OPENSEARCH_URL": f"http://{self.endpoint(host, 'search')}",
                "ANTHROPIC_BASE_URL": paid, "VOYAGE_BASE_URL": f"{paid}/v1"}

    def network(self, **ask: Any) -> dict[str, Any]:
        with socket.create_connection(("127.0.0.1", self.control_port), timeout=10) as s:
            s.sendall((json.dumps(ask) + "\n").encode())
            answer: dict[str, Any] = json.loads(s.makefile().readline())
            return answer

    def cut(self, host: str, *services: str) -> None:
        """Partition ``host`` from ``services`` (all when none named): silence, no reset."""
        self.network(op="set", routes=[f"{host}-{s}" for s in services or SERVICES], cut=True)

    def heal(self, host: str, *services: str) -> None:
        self.network(op="set", routes=[f"{host}-{s}" for s in services or SERVICES], cut=False)

    def delay(self, ms: float) -> None:
        """``ms`` added each way on every route."""
        self.network(op="set", routes=list(self.route_ports), delay_ms=ms)

    def stats(self) -> dict[str, Any]:
        return self.network(op="stats")

    # -- the services ------------------------------------------------------------------------

    def _redis(self) -> None:
        data = self.folder / "redis"
        data.mkdir()
        proc, log = _spawn(["ip", "netns", "exec", namespace("redis"), "redis-server", "--bind", address("redis"),
                            "--port", "6379", "--dir", str(data), "--appendonly", "yes", "--save", "",
                            "--maxmemory-policy", "noeviction", "--protected-mode", "no"], f"{self.cluster}-redis")
        self.procs.append(proc)

        def ready() -> bool:
            out = subprocess.run(["redis-cli", "-h", address("redis"), "ping"], capture_output=True, text=True)
            return out.stdout.strip() == "PONG"

        self._wait(ready, proc, log, "redis")

    def _opensearch(self) -> None:
        started = subprocess.run([str(OPENSEARCH), "start", self.cluster, "1", "9200"], capture_output=True, text=True,
                                 timeout=600, env={**os.environ, "SITUATE_CLUSTER_HOST": address("search"),
                                                   "SITUATE_CLUSTER_NETNS": namespace("search")})
        if started.returncode:
            raise ProcessDied(f"OpenSearch in the fleet did not start:\n{started.stderr[-3000:]}")

    def worker(self, host: str, concurrency: int, env: dict[str, str], extra: list[str] | None = None) -> Worker:
        w = Worker(concurrency, extra, env={**env, **self.env_of(host)}, name=f"{host}-{uuid.uuid4().hex[:6]}",
                   prefix=["ip", "netns", "exec", namespace(host)])
        self.workers.setdefault(host, []).append(w)
        return w

    def api(self, env: dict[str, str]) -> Api:
        """``situate api`` on the api host, listening on its address (a token in ``env``)."""
        self.api_process = Api({**env, **self.env_of("api")}, host=address("api"),
                               prefix=["ip", "netns", "exec", namespace("api")])
        return self.api_process

    def lose(self, host: str) -> None:
        """The whole host at once: every process in its namespace killed, its links cut."""
        self.cut(host)
        pids = _ip("netns", "pids", namespace(host), check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        for w in self.workers.get(host, []):
            w.ended_on_purpose = True
            w.proc.wait()

    # -- plumbing ----------------------------------------------------------------------------

    @staticmethod
    def _wait(ready, proc: subprocess.Popen, log: Path, what: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                raise ProcessDied(f"{what} exited with {proc.returncode}:\n{log_tail(log)}")
            if time.monotonic() > deadline:
                raise ProcessDied(f"{what} not ready within {timeout:.0f} s:\n{log_tail(log)}")
            time.sleep(0.1)

    def close(self) -> None:
        if getattr(self, "api_process", None):
            self.api_process.stop()
        for ws in self.workers.values():
            for w in ws:
                w.stop()
        subprocess.run([str(OPENSEARCH), "stop", self.cluster, "--purge"], capture_output=True, timeout=180)
        for proc in self.procs:
            stop(proc)
        self._down()
        subprocess.run(["rm", "-rf", str(self.folder)], check=False)

    @staticmethod
    def _down() -> None:
        for host in HOSTS:
            for pid in _ip("netns", "pids", namespace(host), check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _ip("netns", "del", namespace(host), check=False)
            _ip("link", "del", f"sfl-{host}", check=False)
        _ip("link", "del", BRIDGE, check=False)


__all__ = ["LOGS", "Fleet", "address", "available", "namespace"]
