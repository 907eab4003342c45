"""The stand-in's prompt cache: what a provider reads, writes or charges as plain input, by the
rules the providers document (and our cost figures rest on):

- the cache key is the exact prefix up to a breakpoint;
- an entry becomes visible only when the response that wrote it *starts*, and lives ``ttl_s``,
  refreshed on each hit;
- a prefix under the model's minimum is never cached. The minimum is the provider's
  (``API_CACHE_MINIMUM``, from the sources), not our table's: a wrong entry in ours then shows
  as calls that cache nothing, as it would against the real API;
- with several breakpoints, the longest prefix (ending at a breakpoint) that is cached and
  visible is read, and what follows it, up to the last breakpoint, is written.

Tokens are counted with the stand-in's own rule (words and punctuation marks).
"""

from __future__ import annotations

import hashlib
import re
import time
from typing import Any

# The providers' cache minimums where a source states them; others: the model table's.
API_CACHE_MINIMUM = {
    "claude-haiku-5-5": 512,  # seeds/000: "un point de cache demande au moins 512 tokens avant lui"
}
TOKEN = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str) -> int:
    return len(TOKEN.findall(text))


def plan(cache: dict[str, dict[str, float]], spec: Any, blocks: list[tuple[str, bool]], ttl_s: float) -> dict[str, Any]:
    """blocks: (text, breakpoint after it) -> the call's usage; ``_keys``: the entries to create
    once its response starts (``commit``)."""
    minimum = API_CACHE_MINIMUM.get(spec.id, spec.min_cacheable_tokens)
    now = time.monotonic()
    ends = [i for i, (_, bp) in enumerate(blocks) if bp]
    total = count_tokens("".join(t for t, _ in blocks))
    usage: dict[str, Any] = {"input_tokens": total, "cache_write_tokens": 0, "cache_read_tokens": 0}
    prefixes = ["".join(t for t, _ in blocks[: i + 1]) for i in ends]
    cacheable = [(p, n) for p, n in ((p, count_tokens(p)) for p in prefixes) if n >= minimum]
    if not cacheable:
        return usage
    keys = [hashlib.sha256(f"{spec.id}\x00{ttl_s}\x00{p}".encode()).hexdigest() for p, _ in cacheable]
    read = 0
    for key, (_, n) in zip(keys, cacheable):
        entry = cache.get(key)
        if entry and entry["visible_at"] <= now < entry["expires_at"]:
            read = n
            entry["expires_at"] = now + ttl_s  # refreshed on each hit
    longest = cacheable[-1][1]
    usage.update(cache_read_tokens=read, cache_write_tokens=longest - read, input_tokens=total - longest)
    if longest > read:
        usage["_keys"] = keys
    return usage


def commit(cache: dict[str, dict[str, float]], usage: dict[str, Any], visible_at: float, ttl_s: float) -> None:
    """The entries a call wrote become visible at ``visible_at`` (when its response starts)."""
    for key in usage.pop("_keys", None) or []:
        old = cache.get(key)
        if not old or old["expires_at"] <= time.monotonic():
            cache[key] = {"visible_at": visible_at, "expires_at": visible_at + ttl_s}
