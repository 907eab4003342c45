"""Who may do what through the API: an admin token, and tokens scoped to a collection.

- ``SITUATE_API_TOKEN`` is the admin token: every collection, every action.
- ``situate token create --collection C --scope read|write|admin`` issues a token for one
  collection (``*``: all). read = search and status; write = also submit and delete documents;
  admin = also create, configure and drop collections (their contextualizer, model, prompt).
  A token is shown once; Redis keeps only its SHA-256 (``workers.storage.tokens``).
- A view of the whole fleet (``/metrics``, the dashboard) needs a token on ``*``: a request
  that names no collection is one about all of them.
- A token scoped to a collection belongs to that collection's generation: a drop revokes it,
  and a new collection of the same name does not open to it.

Closed by default: the API answers without a token only while it listens on loopback with no
admin token set and no token issued (a developer's machine), and then only to requests whose
``Host`` is a loopback name (a page elsewhere that rebinds its DNS name to 127.0.0.1 is refused)
and, for a request that changes anything, that come from no other site (``http_guard``);
``situate api`` refuses to listen beyond loopback without ``SITUATE_API_TOKEN``. Open mode is
decided when the API starts, and closes for good in that process the moment a token exists:
revoking every token later (dropping the last collection does) never opens an API that had one.
"""

from __future__ import annotations

import hashlib
import ipaddress
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import Depends, Request

from workers.errors import Denied
from workers.settings import get_settings
from workers.storage import catalog, tokens

SCOPES = tokens.SCOPES


@dataclass(frozen=True)
class Principal:
    id: str          # "admin", "open", or the token's id
    collection: str  # "*" or one collection
    scope: str
    token: str = ""  # what the credential's validity is checked against later (dashboard sessions)

    def allows(self, collection: str | None, need: str) -> bool:
        """``collection`` None: every collection (a fleet view), which only a ``*`` token covers."""
        scope_ok = SCOPES.index(self.scope) >= SCOPES.index(need)
        return scope_ok and (self.collection == "*" or collection == self.collection)


OPEN = Principal("open", "*", "admin", "open")


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def loopback_host_header(host: str | None) -> bool:
    """A ``Host`` header naming this machine by a loopback name: ``localhost``, ``127.0.0.1``,
    ``[::1]``, with or without a port."""
    if not host:
        return False
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 or host.startswith("[") else host
    if name.startswith("[") and "]" in name:
        name = name[1:name.index("]")]
    return name.lower() in ("localhost", "127.0.0.1", "::1")


OPEN_RECHECK_S = 5.0
# None: not decided yet; True: open, until a token is seen; False: closed for this process's life.
_open: bool | None = None
_open_checked = 0.0


def open_mode() -> bool:
    """No credential exists at all: a developer's loopback API. Once closed, closed."""
    global _open, _open_checked
    s = get_settings()
    if _open is False or s.api_token or not is_loopback(s.api_host):
        _open = False
        return False
    if _open is None or time.monotonic() - _open_checked > OPEN_RECHECK_S:
        _open = not tokens.any_issued()
        _open_checked = time.monotonic()
    return _open


def _admin_marker(token: str) -> str:
    return "admin:" + hashlib.sha256(token.encode()).hexdigest()


def authenticate(authorization: str | None) -> Principal:
    """The caller behind an ``Authorization`` header, or Denied(401)."""
    s = get_settings()
    if not authorization:
        if open_mode():
            return OPEN
        raise Denied(401, "missing bearer token")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Denied(401, "expected: Authorization: Bearer <token>")
    if s.api_token and secrets.compare_digest(token.encode(), s.api_token.encode()):
        return Principal("admin", "*", "admin", _admin_marker(token))
    principal = from_digest(tokens.digest(token))
    if principal is None:
        raise Denied(401, "unknown or revoked token")
    return principal


def from_digest(token_digest: str) -> Principal | None:
    """The principal of a stored token, if it is still valid: issued, not revoked, and — for a
    collection's token — made for the collection's current generation."""
    record = tokens.find(token_digest)
    if record is None:
        return None
    collection, generation = record["collection"], record.get("generation") or ""
    if collection != "*" and generation:
        config = catalog.find(collection)
        if config is None or config.generation != generation:
            return None  # its collection was dropped (and perhaps made again for someone else)
    return Principal(record["id"], collection, record["scope"], token_digest)


def still_valid(principal: Principal) -> bool:
    """Whether the credential a principal was made from still holds (a dashboard session asks on
    every request): a revoked token, or a changed admin token, ends it."""
    if principal.token == "open":
        return open_mode()
    if principal.token.startswith("admin:"):
        current = get_settings().api_token
        return bool(current) and secrets.compare_digest(_admin_marker(current), principal.token)
    again = from_digest(principal.token)
    return again is not None and (again.collection, again.scope) == (principal.collection, principal.scope)


def readable(principal: Principal) -> list[str]:
    """The collections ``principal`` may read, and no other's name (the pages, the MCP tools)."""
    return [name for name in catalog.list_names() if principal.allows(name, "read")]


def authorize(principal: Principal, collection: str | None, need: str) -> None:
    if not principal.allows(collection, need):
        raise Denied(403, f"this token may not {need} collection {collection!r}" if collection
                     else f"this needs a token with the {need} scope on every collection ('*')")


def create_token(collection: str, scope: str, name: str = "") -> tuple[str, str]:
    """Issue a token (``situate token create``): bound to the collection's generation if it exists."""
    config = catalog.find(collection) if collection != "*" else None
    return tokens.create(collection, scope, name, generation=config.generation if config else "")


def caller(request: Request) -> Principal:
    """A route's dependency: who is asking (401 without a valid token)."""
    return authenticate(request.headers.get("authorization"))


def allowed(need: str) -> Callable[..., Principal]:
    """A route's dependency: the caller, if it may ``need`` on the path's collection (all, if none)."""
    def check(request: Request, principal: Principal = Depends(caller)) -> Principal:
        authorize(principal, request.path_params.get("collection"), need)
        return principal
    return check
