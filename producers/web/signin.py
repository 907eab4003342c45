"""Signing in to the API's pages, once for all of them: the search page (any token that reads a
collection) and the dashboard (a token that reads them all, ``*``).

A browser cannot send a bearer token with a page load, so it signs in once: the token is checked
like any API call, and the browser gets a random session id in an HttpOnly, SameSite=Strict cookie
(Secure over HTTPS) for ``SITUATE_DASHBOARD_SESSION_S``; Redis keeps only the id's SHA-256
(``storage.sessions``). Every request of the session checks its token again: revoking the token (or
changing the admin token) ends the session at once. What changes anything (signing out, the
dashboard's retry) also needs the session's CSRF token, sent back by the page (a header, or a
form field): a cookie alone, sent by another site's form, does nothing. The pages allow no script
but their own and cannot be framed (``HEADERS``).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from producers.web import auth, http_guard, templates
from workers import errors
from workers.settings import get_settings
from workers.storage import sessions

COOKIE = "situate_session"
HEADERS = {"Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                                      "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
           "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}
PAGES = ("/search", "/dashboard")  # where a sign-in may lead back to

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class Session:
    principal: auth.Principal
    csrf: str

    def who(self) -> str:
        p = self.principal
        return f"{p.id} ({p.scope}{'' if p.collection == '*' else ' on ' + p.collection})"


def page(message: str = "", then: str = "/search", status: int = 401) -> HTMLResponse:
    """The sign-in form; after it, the page it was asked from."""
    body = templates.render("signin.html", message=message, next=_safe_next(then))
    return HTMLResponse(body, status_code=status, headers=HEADERS)


def _safe_next(then: str) -> str:
    """Only a page of ours: never another site (an open redirect)."""
    return then if then.startswith(PAGES) and not then.startswith("//") and "\\" not in then else "/search"


def current(request: Request, need: str = "read") -> Session:
    """The request's session if its token still holds; ``need`` beyond read also wants the CSRF
    token (the ``X-CSRF-Token`` header, or a ``csrf`` form field: ``csrf_sent``)."""
    session_id = request.cookies.get(COOKIE)
    record = sessions.find(session_id) if session_id else None
    if record is None or session_id is None:
        if need == "read" and auth.open_mode():  # no token exists, loopback only: the pages just open
            return Session(auth.OPEN, "")
        raise errors.Denied(401, "sign in first")
    principal = auth.Principal(record["principal"], record["collection"], record["scope"], record.get("token", ""))
    if not auth.still_valid(principal):  # revoked since sign-in: the session ends with its token
        sessions.end(session_id)
        raise errors.Denied(401, "the token this session was opened with is no longer valid: sign in again")
    session = Session(principal, record["csrf"])
    if need != "read":
        sent = request.headers.get("x-csrf-token", "")
        if not secrets.compare_digest(sent.encode(), session.csrf.encode()):
            raise errors.Denied(403, "missing or wrong CSRF token")
    return session


def csrf_sent(request: Request, form: dict[str, list[str]]) -> bool:
    session = current(request)
    sent = (form.get("csrf") or [""])[0]
    return secrets.compare_digest(sent.encode(), session.csrf.encode())


async def _sign_in(request: Request) -> Response:
    # The form's fields: a body of at most http_guard.SMALL_BODY_BYTES (the guard refuses more
    # before it is read), so parsing it here costs the event loop nothing.
    form = parse_qs((await http_guard.read_body(request)).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0][:512]
    then = _safe_next((form.get("next") or ["/search"])[0])
    try:
        principal = auth.authenticate(f"Bearer {token}" if token else None)
        if principal.scope not in auth.SCOPES:
            raise errors.Denied(403, "this token reads nothing")
    except errors.Denied as e:
        return page(f"Not signed in: {e}.", then)
    session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    ttl = get_settings().dashboard_session_s
    sessions.create(session_id, {"principal": principal.id, "scope": principal.scope, "collection": principal.collection,
                                 "token": principal.token, "csrf": csrf}, ttl)
    response = RedirectResponse(then, status_code=303, headers=HEADERS)
    response.set_cookie(COOKIE, session_id, max_age=ttl, httponly=True, samesite="strict",
                        secure=request.url.scheme == "https", path="/")
    return response


@router.post("/signin")
async def sign_in(request: Request) -> Response:
    return await _sign_in(request)


@router.post("/dashboard/login")  # the dashboard's own address for it, before the search page
async def dashboard_login(request: Request) -> Response:
    return await _sign_in(request)


@router.post("/signout")
async def sign_out(request: Request) -> Response:
    """Ends the session: with the page's CSRF token (a header, or the form's ``csrf`` field)."""
    form = parse_qs((await http_guard.read_body(request)).decode("utf-8", "replace"))
    if "csrf" in form:
        if not csrf_sent(request, form):
            raise errors.Denied(403, "missing or wrong CSRF token")
    else:
        current(request, "write")
    sessions.end(request.cookies[COOKIE])
    response = RedirectResponse("/search", status_code=303, headers=HEADERS)
    response.delete_cookie(COOKIE, path="/")
    return response
