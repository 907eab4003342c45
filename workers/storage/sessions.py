"""Browser sessions of the API's pages (the dashboard, the search page): who signed in, and the
CSRF token their page sends back. A session id is a random secret the browser holds in an
HttpOnly cookie; Redis keeps only its SHA-256, so a copy of Redis opens no session."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from workers import keys
from workers.connections import redis_client


def _key(session_id: str) -> str:
    return keys.session(hashlib.sha256(session_id.encode()).hexdigest())


def create(session_id: str, record: dict[str, Any], ttl_s: int) -> None:
    redis_client().set(_key(session_id), json.dumps(record), ex=ttl_s)


def find(session_id: str) -> dict[str, Any] | None:
    raw = redis_client().get(_key(session_id))
    return None if raw is None else dict(json.loads(raw))


def end(session_id: str) -> None:
    redis_client().delete(_key(session_id))
