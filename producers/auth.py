"""Who may do what through the API: an admin token, and tokens scoped to a collection.

- ``SITUATE_API_TOKEN`` is the admin token: every collection, every action.
- ``situate token create --collection C --scope read|write|admin`` issues a token for one
  collection (``*``: all). read = search and status; write = also submit and delete documents;
  admin = also create, configure and drop collections (their contextualizer, model, prompt).
  A token is shown once; Redis keeps only its SHA-256, so a leaked Redis dump leaks no token.

Closed by default: the API answers without a token only while it listens on loopback with no
admin token set and no token issued (a developer's machine); ``situate api`` refuses to listen
beyond loopback without ``SITUATE_API_TOKEN``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import secrets
import time
from dataclasses import dataclass

from workers.connections import redis_client
from workers.settings import get_settings

SCOPES = ("read", "write", "admin")
_TOKENS = "situate:tokens"


class Denied(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Principal:
    id: str          # "admin", or the token's id
    collection: str  # "*" or one collection
    scope: str

    def allows(self, collection: str | None, need: str) -> bool:
        scope_ok = SCOPES.index(self.scope) >= SCOPES.index(need)
        return scope_ok and (self.collection == "*" or collection is None or collection == self.collection)


OPEN = Principal("open", "*", "admin")


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create(collection: str, scope: str, name: str = "") -> tuple[str, str]:
    """A new token: (token, id). The token itself is not stored anywhere."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}")
    token = "sit_" + secrets.token_urlsafe(32)
    digest = _digest(token)
    record = {"id": digest[:12], "collection": collection, "scope": scope, "name": name, "created": time.time()}
    redis_client().hset(_TOKENS, digest, json.dumps(record))
    return token, record["id"]


def revoke(token_or_id: str) -> bool:
    r = redis_client()
    digest = _digest(token_or_id)
    if r.hdel(_TOKENS, digest):
        return True
    for key, raw in r.hscan_iter(_TOKENS):
        if json.loads(raw)["id"] == token_or_id:
            return bool(r.hdel(_TOKENS, key))
    return False


def listing() -> list[dict]:
    return sorted((json.loads(raw) for _, raw in redis_client().hscan_iter(_TOKENS)), key=lambda t: t["created"])


_issued_cache: tuple[float, bool] = (0.0, False)


def _any_issued() -> bool:
    global _issued_cache
    checked, issued = _issued_cache
    if time.monotonic() - checked > 5:
        issued = bool(redis_client().hlen(_TOKENS))
        _issued_cache = (time.monotonic(), issued)
    return issued


def authenticate(authorization: str | None) -> Principal:
    """The caller behind an ``Authorization`` header, or Denied(401)."""
    s = get_settings()
    if not authorization:
        if not s.api_token and is_loopback(s.api_host) and not _any_issued():
            return OPEN
        raise Denied(401, "missing bearer token")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Denied(401, "expected: Authorization: Bearer <token>")
    if s.api_token and secrets.compare_digest(token.encode(), s.api_token.encode()):
        return Principal("admin", "*", "admin")
    raw = redis_client().hget(_TOKENS, _digest(token))
    if raw is None:
        raise Denied(401, "unknown or revoked token")
    record = json.loads(raw)
    return Principal(record["id"], record["collection"], record["scope"])


def authorize(principal: Principal, collection: str | None, need: str) -> None:
    if not principal.allows(collection, need):
        raise Denied(403, f"this token may not {need} collection {collection!r}" if collection
                     else f"this needs a token with the {need} scope on every collection")
