"""Lua scripts kept in ``storage/lua/*.lua``, each registered once per Redis client.

``register_script`` hashes and wraps a script (EVALSHA, loading it on the first NOSCRIPT):
doing that on every call, as an inline string, costs a SHA-1 of the source each time. Here each
file is read once and its ``Script`` is kept per client (tests switch clients between services).

Lua has no imports, and the state scripts share helpers: a line ``--! include NAME`` is replaced
by ``lua/NAME.lua`` when the file is read (once), so each script is still one EVALSHA.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workers.connections import redis_client

FOLDER = Path(__file__).with_name("lua")
_sources: dict[str, str] = {}
_INCLUDE = re.compile(r"^--! include (\w+)$", re.M)
_registered: dict[tuple[int, str], Any] = {}


def script(name: str) -> Any:
    """The ``Script`` for ``lua/<name>.lua`` on the current Redis client."""
    client = redis_client()
    key = (id(client), name)
    found = _registered.get(key)
    if found is None or found.registered_client is not client:
        found = _registered[key] = client.register_script(source(name))
    return found


def source(name: str) -> str:
    """The text of ``lua/<name>.lua``, its includes in place."""
    if name not in _sources:
        text = (FOLDER / f"{name}.lua").read_text()
        _sources[name] = _INCLUDE.sub(lambda m: source(m.group(1)), text)
    return _sources[name]


def in_pipeline(pipe: Any, name: str, keys: list[str], args: list[Any]) -> None:
    """``name`` as one EVALSHA in ``pipe``. redis-py checks every script of a pipeline with a
    SCRIPT EXISTS round trip before the pipeline itself; this skips it: run the pipeline with
    ``run_loaded``, which loads the scripts on a NOSCRIPT and runs it again."""
    pipe.evalsha(script(name).sha, len(keys), *keys, *args)


def run_loaded(build: Callable[[Any], None], names: list[str]) -> list[Any]:
    """A pipeline ``build`` fills, run; on a NOSCRIPT (a Redis restarted, its scripts flushed)
    the scripts ``names`` loaded and the pipeline built and run again — so its commands must be
    ones that may run twice."""
    from redis.exceptions import NoScriptError

    for attempt in (0, 1):
        pipe = redis_client().pipeline(transaction=False)
        build(pipe)
        try:
            return list(pipe.execute())
        except NoScriptError:
            if attempt:
                raise
            for name in names:
                redis_client().script_load(source(name))
    return []
