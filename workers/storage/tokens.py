"""API tokens as stored: one Redis hash, keyed by each token's SHA-256, never the token itself.

A leaked Redis dump leaks no token. Each record says what the token may reach: a collection
(or ``*``), a scope, and — for a collection that existed when the token was made — that
collection's *generation* (``catalog.CollectionConfig.generation``). Dropping a collection
revokes its tokens (``revoke_collection``), and a token whose generation is not the
collection's current one is refused anyway: a new collection of the same name never opens to
the old tenant.

Who may do what with a token is ``producers.web.auth``'s business; this module is the records only,
kept here so that ``lifecycle.delete`` can revoke a collection's tokens as part of the drop.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from typing import Any

from workers import keys
from workers.connections import redis_client

KEY = keys.TOKENS
SCOPES = ("read", "write", "admin")


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create(collection: str, scope: str, name: str = "", generation: str = "") -> tuple[str, str]:
    """A new token: (token, id). The token itself is not stored anywhere."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}")
    token = "sit_" + secrets.token_urlsafe(32)
    key = digest(token)
    record = {"id": key[:12], "collection": collection, "scope": scope, "name": name, "created": time.time(),
              "generation": generation}
    redis_client().hset(KEY, key, json.dumps(record))
    return token, key[:12]


def find(token_digest: str) -> dict[str, Any] | None:
    raw = redis_client().hget(KEY, token_digest)
    return None if raw is None else json.loads(raw)


def revoke(token_or_id: str) -> bool:
    r = redis_client()
    if r.hdel(KEY, digest(token_or_id)):
        return True
    for key, raw in r.hscan_iter(KEY):
        if json.loads(raw)["id"] == token_or_id:
            return bool(r.hdel(KEY, key))
    return False


def revoke_collection(collection: str) -> int:
    """Revoke every token scoped to ``collection`` (a drop): how many there were."""
    r = redis_client()
    doomed = [key for key, raw in r.hscan_iter(KEY) if json.loads(raw).get("collection") == collection]
    return r.hdel(KEY, *doomed) if doomed else 0


def listing() -> list[dict[str, Any]]:
    return sorted((json.loads(raw) for _, raw in redis_client().hscan_iter(KEY)), key=lambda t: t["created"])


def any_issued() -> bool:
    return bool(redis_client().hlen(KEY))
