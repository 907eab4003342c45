"""A TCP proxy in front of an HTTP/1.1 server that cuts a share of its requests, the ways a
network and a busy provider cut them:

- ``drop``: the connection is closed before the request is passed on, without an answer (what a
  client sees when a peer closes an idle keep-alive connection as it sends: ``Remote end closed
  connection without response``). Not billed: the server never saw it.
- ``reset``: the request is passed on, and once its answer begins the connection is reset (RST).
  Billed: the server did the work, the client never had the answer.
- ``stall``: the request is passed on and nothing comes back for ``stall_s``, past the client's
  read timeout. Billed, and asked again.

The stand-in (``standin.py``) puts one in front of its routes (its ``/standin/*`` control routes
are never cut); ``harness.FaultyProxy`` runs one in front of any server (an S3 stand-in). A
request is read whole (headers, ``Content-Length`` body) before its fate is drawn, so keep-alive
connections are cut request by request; a chunked request body turns the connection into a
plain relay. The figures (requests, and each kind cut) are in ``stats``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Faults:
    p_drop: float = 0.0
    p_reset: float = 0.0
    p_stall: float = 0.0
    stall_s: float = 10.0
    seed: int = 11


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], faults: Callable[[], Faults], exempt: tuple[str, ...] = (),
                 on_change: Callable[[], None] | None = None):
        self.upstream, self.faults, self.exempt = upstream, faults, exempt
        self.on_change = on_change
        self.stats: Counter[str] = Counter()
        self.random = random.Random(faults().seed)

    def reset(self) -> None:
        self.stats = Counter()
        self.random = random.Random(self.faults().seed)

    async def serve(self, host: str, port: int) -> asyncio.Server:
        return await asyncio.start_server(self._connection, host, port, limit=1 << 20)

    def _fate(self) -> str:
        f = self.faults()
        draw = self.random.random()
        for fate, share in (("drop", f.p_drop), ("reset", f.p_reset), ("stall", f.p_stall)):
            if draw < share:
                return fate
            draw -= share
        return "pass"

    def _count(self, what: str) -> None:
        self.stats[what] += 1
        if self.on_change is not None:
            self.on_change()

    async def _connection(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r: asyncio.StreamReader | None = None
        up_w: asyncio.StreamWriter | None = None
        pump: asyncio.Task[None] | None = None
        try:
            while True:
                try:
                    head = await client_r.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
                chunked = "chunked" in headers.get("transfer-encoding", "").lower()
                body = b"" if chunked else await client_r.readexactly(int(headers.get("content-length") or 0))
                path = lines[0].split(" ")[1] if lines[0].count(" ") >= 2 else ""
                exempt = chunked or path.startswith(self.exempt)
                fate = "pass" if exempt else self._fate()
                if not exempt:
                    self._count("requests")
                if fate == "drop":
                    self._count("drop")
                    return  # closed below, without an answer
                if up_w is None:
                    up_r, up_w = await asyncio.open_connection(*self.upstream, limit=1 << 20)
                    pump = asyncio.create_task(_relay(up_r, client_w))
                if chunked:  # no more request boundaries to see: relay the rest as it comes
                    up_w.write(head)
                    await _relay(client_r, up_w)
                    return
                if fate == "pass":
                    up_w.write(head + body)
                    await up_w.drain()
                    continue
                assert pump is not None and up_r is not None
                pump.cancel()  # this request's answer must not reach the client
                up_w.write(head + body)
                await up_w.drain()
                if fate == "reset":
                    try:  # the answer begins: the work is done (and billed)
                        await asyncio.wait_for(up_r.read(1), timeout=120)
                    except (TimeoutError, ConnectionError):
                        pass
                    self._count("reset")
                    sock = client_w.get_extra_info("socket")
                    if sock is not None:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    client_w.transport.abort()
                    return
                self._count("stall")
                await asyncio.sleep(self.faults().stall_s)
                return
        finally:
            if pump is not None:
                pump.cancel()
            for writer in (up_w, client_w):
                if writer is not None and not writer.is_closing():
                    writer.close()


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.CancelledError):
        return
    finally:
        if not writer.is_closing() and reader.at_eof():
            writer.close()


def serve_app(make_app: Callable[[FaultProxy], Any], faults: Callable[[], Faults], port: int,
              exempt: tuple[str, ...] = ()) -> None:
    """An ASGI app (built given its proxy, for its figures) served by uvicorn on a port of its
    own, behind a ``FaultProxy`` on ``port``."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        inner = s.getsockname()[1]
    proxy = FaultProxy(("127.0.0.1", inner), faults, exempt=exempt)
    server = uvicorn.Server(uvicorn.Config(make_app(proxy), host="127.0.0.1", port=inner, log_level="warning"))

    async def run() -> None:
        front = await proxy.serve("127.0.0.1", port)
        async with front:
            await server.serve()

    asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="host:port")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--faults", default="{}", help="JSON: p_drop, p_reset, p_stall, stall_s, seed")
    parser.add_argument("--stats", required=True, help="a file the figures are written to, as JSON")
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    faults = Faults(**json.loads(args.faults))
    stats_file = Path(args.stats)

    def write_stats() -> None:
        partial = stats_file.with_suffix(".tmp")
        partial.write_text(json.dumps(dict(proxy.stats)))
        partial.replace(stats_file)

    proxy = FaultProxy((host, int(port)), lambda: faults, on_change=write_stats)
    write_stats()

    async def run() -> None:
        server = await proxy.serve("127.0.0.1", args.port)
        async with server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
