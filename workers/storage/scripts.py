"""Lua scripts kept in ``storage/lua/*.lua``, each registered once per Redis client.

``register_script`` hashes and wraps a script (EVALSHA, loading it on the first NOSCRIPT):
doing that on every call, as an inline string, costs a SHA-1 of the source each time. Here each
file is read once and its ``Script`` is kept per client (tests switch clients between services).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workers.connections import redis_client

FOLDER = Path(__file__).with_name("lua")
_sources: dict[str, str] = {}
_registered: dict[tuple[int, str], Any] = {}


def script(name: str) -> Any:
    """The ``Script`` for ``lua/<name>.lua`` on the current Redis client."""
    client = redis_client()
    key = (id(client), name)
    found = _registered.get(key)
    if found is None or found.registered_client is not client:
        if name not in _sources:
            _sources[name] = (FOLDER / f"{name}.lua").read_text()
        found = _registered[key] = client.register_script(_sources[name])
    return found
