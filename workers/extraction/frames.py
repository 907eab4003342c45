"""Length-prefixed frames over a pipe: how a worker and its extraction child talk.

A frame is a 4-byte big-endian length, then that many bytes. Nothing else ever travels on the two
pipes (the child's stdout and stderr are other file descriptors), so a library that prints cannot
be mistaken for an answer, and an answer is read whole or not at all: a frame longer than the
reader allows, a short read or a stray byte ends the conversation (the worker then replaces the
child). Reads and writes on the worker's side have a deadline, so a child that stops answering,
or stops reading, never holds the worker past it.
"""

from __future__ import annotations

import os
import selectors
import struct
import time

HEADER = struct.Struct(">I")
MAX_FRAME = (1 << 32) - 1
CHUNK = 1 << 20


class FrameError(Exception):
    """The other side broke the protocol, closed its pipe, or let the deadline pass."""


def _wait(fd: int, event: int, deadline: float | None) -> None:
    if deadline is None:
        return
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError
    with selectors.DefaultSelector() as selector:
        selector.register(fd, event)
        if not selector.select(remaining):
            raise TimeoutError


def write(fd: int, payload: bytes | bytearray, deadline: float | None = None) -> None:
    """One frame; with a deadline, ``fd`` must be non-blocking (``TimeoutError`` past it)."""
    if len(payload) > MAX_FRAME:
        raise FrameError(f"a frame of {len(payload):,} bytes is over the protocol's limit")
    for part in (HEADER.pack(len(payload)), payload):  # the payload as it is: never copied
        _write_all(fd, memoryview(part), deadline)


def _write_all(fd: int, view: memoryview, deadline: float | None) -> None:
    while view:
        _wait(fd, selectors.EVENT_WRITE, deadline)
        try:
            sent = os.write(fd, view[:CHUNK])
        except BlockingIOError:
            continue
        except BrokenPipeError:
            raise FrameError("the other side closed its pipe") from None
        view = view[sent:]


def _exactly(fd: int, size: int, deadline: float | None) -> bytearray:
    out = bytearray()
    while len(out) < size:
        _wait(fd, selectors.EVENT_READ, deadline)
        try:
            chunk = os.read(fd, min(CHUNK, size - len(out)))
        except BlockingIOError:
            continue
        if not chunk:
            raise EOFError
        out += chunk
    return out


def read(fd: int, max_size: int, deadline: float | None = None) -> bytearray:
    """One frame of at most ``max_size`` bytes. ``EOFError`` when the pipe closes between
    frames or inside one, ``FrameError`` for a frame over ``max_size``, ``TimeoutError`` past
    the deadline."""
    (size,) = HEADER.unpack(_exactly(fd, HEADER.size, deadline))
    if size > max_size:
        raise FrameError(f"a frame of {size:,} bytes, over the {max_size:,} allowed")
    return _exactly(fd, size, deadline)
