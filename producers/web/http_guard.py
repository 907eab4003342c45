"""What every request to the API passes before any route sees it: one framing, a size limit
counted as the bytes arrive, and — with no credential configured at all — callers on this
machine only. Then bodies are read only by routes, after authentication (``json_body``).

- **One framing.** ``Content-Length`` together with ``Transfer-Encoding`` is refused (400), as
  RFC 9112 §6.1 says a server ought to: a proxy and the server may read such a request
  differently (request smuggling), and the length given is not the length sent. So is a
  ``Content-Length`` that is not one number.
- **Size as it arrives.** A declared length over the limit is refused before a byte is read;
  a chunked body is counted chunk by chunk and refused (413) as soon as it passes the limit, so
  nothing past it is ever buffered. The sign-in form, the one body a stranger may send, is
  capped at ``SMALL_BODY_BYTES``.
- **Open mode is for this machine.** Without ``SITUATE_API_TOKEN`` or any token issued the API
  trusts its loopback bind address; a web page elsewhere can still reach it through the browser
  (a form post, or a DNS name rebound to 127.0.0.1), so only a loopback ``Host`` is answered
  (421 otherwise), and no request that changes anything (POST, PUT, DELETE, PATCH: uploads, the
  bodiless ``refresh`` and ``reindex/…`` too) is taken from another site: a browser says where a
  request comes from (``Sec-Fetch-Site``, ``Origin``), and one from elsewhere is refused (403).
  A client that is not a browser (curl, the SDK) sends neither and is served. JSON routes also
  take ``Content-Type: application/json`` only (415), which no HTML form can send without the
  browser asking first (CORS preflight, never granted here).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from producers.web import auth
from workers.settings import get_settings

# Bodies anyone may send before being authenticated: the sign-in form's one field.
SMALL_BODY_BYTES = 4096
UNAUTHENTICATED_BODIES = ("/signin", "/signout", "/dashboard/login", "/dashboard/logout")


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"request body over {limit:,} bytes (SITUATE_MAX_REQUEST_BYTES)")


class RequestGuard:
    """Pure ASGI, outermost of ours: refuses before the app runs, counts what the app reads."""

    def __init__(self, inner: Any):
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.inner(scope, receive, send)
        headers = scope.get("headers") or []
        lengths = [v for k, v in headers if k == b"content-length"]
        encodings = [v for k, v in headers if k == b"transfer-encoding"]
        if lengths and encodings:
            return await _answer(send, 400, "Content-Length and Transfer-Encoding together: send one (RFC 9112 6.1)")
        if len(set(lengths)) > 1 or (lengths and not lengths[0].strip().isdigit()):
            return await _answer(send, 400, "Content-Length must be one number")
        if auth.open_mode():
            if not auth.loopback_host_header(_header(headers, b"host")):
                return await _answer(send, 421, "this API has no token configured and answers its own machine only "
                                                "(Host: localhost, 127.0.0.1 or [::1])")
            if scope.get("method") not in SAFE_METHODS and not same_origin(headers, scope.get("scheme", "http")):
                return await _answer(send, 403, "this API has no token configured: it takes no request that changes "
                                                "anything from another site")
        limit = SMALL_BODY_BYTES if scope.get("path") in UNAUTHENTICATED_BODIES else get_settings().max_request_bytes
        if lengths and int(lengths[0]) > limit:
            return await _answer(send, 413, f"request body over {limit:,} bytes (SITUATE_MAX_REQUEST_BYTES)")
        received = 0
        started = False

        async def counted() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
            return message

        async def watched(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.inner(scope, counted, watched)
        except BodyTooLarge as e:  # read outside a route (a handler would have answered it)
            if not started:
                await _answer(send, 413, str(e.detail))


SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def same_origin(headers: list[tuple[bytes, bytes]], scheme: str) -> bool:
    """Whether a browser sent this from a page of this very API (or a person typed it): its
    ``Sec-Fetch-Site`` says so, or its ``Origin`` is this host. A client that sends neither is
    not a browser, and no web page can make a browser leave both out."""
    site = _header(headers, b"sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = _header(headers, b"origin")
    return origin is None or origin == f"{scheme}://{_header(headers, b'host')}"


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for k, v in headers:
        if k == name:
            return v.decode("latin-1")
    return None


async def _answer(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


async def read_body(request: Request) -> bytearray:
    """The body, in one growing buffer (amortised linear; never a second copy of it)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
    return body


async def json_body(request: Request) -> Any:
    """A JSON route's body: ``application/json`` only (415), parsed off the event loop, its nesting
    bounded (a 100,000-deep array is a 400, not a RecursionError and a 500)."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise HTTPException(415, "send the body as JSON, with Content-Type: application/json")
    raw = await read_body(request)
    return await run_in_threadpool(parse_json, raw)


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def parse_json(raw: bytes | bytearray) -> Any:
    """JSON as RFC 8259 has it: Python's parser also takes ``NaN`` and ``Infinity``, numbers no
    field of ours can hold (a NaN weight would reach the index as a 500)."""
    try:
        return json.loads(raw, parse_constant=_not_json)
    except RecursionError:
        raise HTTPException(400, "the body's JSON is nested too deeply") from None
    except (ValueError, UnicodeDecodeError):
        raise HTTPException(400, "the body is not JSON") from None


def body_of(model: type[BaseModel]) -> Callable[..., Any]:
    """A dependency: the JSON body as ``model`` (422 when it does not fit). Declared after the
    route's token check, so a stranger's body is never read, let alone parsed."""
    async def parse(request: Request) -> Any:
        data = await json_body(request)
        try:
            return model.model_validate(data)
        except ValidationError as e:
            raise RequestValidationError(e.errors()) from None
    return parse


def documented(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI entry of a body parsed by ``body_of`` (FastAPI only documents its own)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": model.model_json_schema(ref_template="#/components/schemas/{model}")}}}}
