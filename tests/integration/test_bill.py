"""The LLM bill's totals in a real Redis, reached through a relay that can lose Redis's replies:
a write Redis applied whose reply never came is sent again, and must add nothing the second time."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import closing
from urllib.parse import urlsplit

import pytest

from tests.support import use_services


class ReplyLosingRelay:
    """A TCP relay in front of Redis: requests always pass; while ``losing`` is set, what Redis
    answers is read and thrown away (the client's read times out, as when a reply is lost)."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.losing = False
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, replies: bool) -> None:
        with closing(source), closing(target):
            try:
                while data := source.recv(65536):
                    if not (replies and self.losing):
                        target.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def relay() -> Iterator[ReplyLosingRelay]:
    from workers.settings import get_settings

    url = urlsplit(get_settings().redis_url)
    r = ReplyLosingRelay((url.hostname or "127.0.0.1", url.port or 6379))
    try:
        with use_services(redis_url=f"redis://127.0.0.1:{r.port}{url.path}?socket_timeout=1"):
            yield r
    finally:
        r.close()


def test_a_bill_write_whose_reply_is_lost_is_added_once(relay: ReplyLosingRelay, collection_name: str) -> None:
    from workers.storage import bill

    fields = {"calls": 1, "input_tokens": 1000, "cost_usd": 0.25}
    bill.add(collection_name, "run-1", fields)
    relay.losing = True
    bill.add(collection_name, "run-1", fields)  # Redis applies it; its reply is lost: kept to send again
    relay.losing = False
    assert bill._pending, "the write whose reply was lost is kept to be sent again"
    bill.add(collection_name, "run-1", fields)  # sends the kept one again with this one
    assert not bill._pending
    for totals in (bill.counts(collection_name), bill.counts(collection_name, "run-1")):
        assert (int(totals["calls"]), int(totals["input_tokens"]), float(totals["cost_usd"])) == (3, 3000, 0.75)
    assert bill.runs(collection_name) == ["run-1"]
