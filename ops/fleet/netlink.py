"""The network between a fleet's hosts (``ops/fleet/hosts.py``): a userspace TCP relay per route (one
host to one service), each with a latency added in each direction and a switch that cuts it.

This kernel has no netem, so latency is added here: every chunk of bytes read on a route is
delivered ``delay_ms`` later, in order (a queue per direction), so a request and its answer
each pay the delay once, as on a link with that one-way latency. A cut route forwards nothing
either way and leaves its connections open — as a partition looks to the hosts on each side:
no reset, no error, silence — and new connections on it are accepted and held; when the route
heals, what was held flows again (a writer cut off mid-run resumes, late). Byte and connection
counts per route are in ``stats``.

Controlled over a JSON-lines socket on 127.0.0.1 (``--control``): ``{"op": "set", "route":
"w1-redis", "delay_ms": 1, "cut": false}``, ``{"op": "stats"}``. Routes come from ``--routes``:
``{"w1-redis": ["10.45.0.1:7001", "10.45.0.2:6379"], ...}`` (listen, upstream).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field


@dataclass
class Route:
    name: str
    upstream: tuple[str, int]
    delay_ms: float = 0.0
    cut: bool = False
    healed: asyncio.Event = field(default_factory=asyncio.Event)
    connections: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    writes_up: int = 0  # chunks forwarded towards the service: about one per request sent

    def __post_init__(self) -> None:
        self.healed.set()

    def set(self, delay_ms: float | None = None, cut: bool | None = None) -> None:
        if delay_ms is not None:
            self.delay_ms = float(delay_ms)
        if cut is not None:
            self.cut = bool(cut)
            if self.cut:
                self.healed.clear()
            else:
                self.healed.set()


async def _pump(route: Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: bool) -> None:
    """Bytes from ``reader`` to ``writer``, each chunk held ``delay_ms`` and nothing while cut."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            await route.healed.wait()
            writer.write(data)
            await writer.drain()
        writer.close()

    delivering = asyncio.create_task(deliver())
    try:
        while True:
            await route.healed.wait()
            data = await reader.read(65536)
            if up:
                route.bytes_up += len(data)
                route.writes_up += 1 if data else 0
            else:
                route.bytes_down += len(data)
            await queue.put((time.monotonic() + route.delay_ms / 1000, data))
            if not data:
                break
    except (ConnectionError, OSError):
        await queue.put((0.0, b""))
    await delivering


async def _serve(route: Route, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
    route.connections += 1
    await route.healed.wait()  # a connection made while cut: held until the route heals
    try:
        up_reader, up_writer = await asyncio.open_connection(*route.upstream)
    except OSError:
        client_writer.close()
        return
    try:
        await asyncio.gather(_pump(route, client_reader, up_writer, True), _pump(route, up_reader, client_writer, False))
    except (ConnectionError, OSError):
        pass
    finally:
        for w in (client_writer, up_writer):
            w.close()


async def _control(routes: dict[str, Route], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        ask = json.loads(line)
        if ask.get("op") == "set":
            for name in ask["routes"] if "routes" in ask else [ask["route"]]:
                routes[name].set(ask.get("delay_ms"), ask.get("cut"))
            answer: dict = {"ok": True}
        else:
            answer = {r.name: {"delay_ms": r.delay_ms, "cut": r.cut, "connections": r.connections,
                               "bytes_up": r.bytes_up, "bytes_down": r.bytes_down, "writes_up": r.writes_up}
                      for r in routes.values()}
        writer.write((json.dumps(answer) + "\n").encode())
        await writer.drain()
    writer.close()


async def main_async(spec: dict[str, list[str]], control_port: int) -> None:
    routes: dict[str, Route] = {}
    servers = []
    for name, (listen, upstream) in spec.items():
        host, _, port = upstream.rpartition(":")
        route = routes[name] = Route(name, (host, int(port)))
        lhost, _, lport = listen.rpartition(":")
        servers.append(await asyncio.start_server(lambda r, w, route=route: _serve(route, r, w), lhost, int(lport)))
    servers.append(await asyncio.start_server(lambda r, w: _control(routes, r, w), "127.0.0.1", control_port))
    print("netlink ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routes", required=True, help='JSON: {"name": ["listen host:port", "upstream host:port"]}')
    parser.add_argument("--control", type=int, required=True, help="the control socket's port on 127.0.0.1")
    args = parser.parse_args()
    asyncio.run(main_async(json.loads(args.routes), args.control))


if __name__ == "__main__":
    main()
