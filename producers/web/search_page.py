"""``/search``: the page where a person checks what a question finds, and the page a hit cites.

For anyone with a token that reads a collection (signed in as every page is, ``signin``): a
collection's token sees and searches its collection only. The form is a GET, so the URL holds
the search (shared, reloaded, bookmarked) and nothing on the page changes state; its values pass
the same model as the API's search route (``SearchIn``: lengths, k, modes, a reranker the
deployment allows), so the page can ask nothing the API would refuse.

Each hit shows what a reader needs to judge it: the document's title and id, the citation
(``p. 60 · Item 8 › …``), the score, the context situate wrote for the chunk in a box of its own
(what contextual retrieval changed), then the chunk's text with the query's words marked and its
Markdown tables drawn as tables. A hit in a PDF whose original was kept shows its page as an
image with the chunk marked on it (``/search/page.png``: drawn in a sandbox child, cached, see
``retrieval.page_images``) and links to the file itself at that page (``/search/original``).

**Labels.** Each hit has two buttons, relevant and not relevant: a person with a token that writes
the collection marks what a question found, and the marks become a labelled question for
``situate eval`` (``evaluation.labelling``; ``/search/label``, a POST with the session's CSRF
token). The page works without a script; its one script (``/search.js``) adds the keyboard: j and
k (or the arrows) move between hits, y and n mark the one selected, without reloading.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from markdown_it import MarkdownIt
from markupsafe import Markup, escape
from pydantic import ValidationError

from producers.evaluation import labelling
from producers.retrieval import page_images, rerankers
from producers.retrieval.hits import SearchIn
from producers.retrieval.search import SearchOptions, search
from producers.web import auth, http_guard, signin, templates
from situate.citations import citation
from workers import allowlist, errors
from workers.contextualizers import keywords
from workers.storage import catalog, labels, states

router = APIRouter(include_in_schema=False)

# CommonMark with its tables, raw HTML off: a chunk's "<script>" stays text.
_markdown = MarkdownIt("commonmark", {"html": False}).enable("table")
_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use marks around a query's words, made <mark> after escaping
_WORD = re.compile(r"[^\W_]+")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
STEM = 4  # a word marked if it begins with a query term of this length or more ("statement" > "statements")
IMAGE_HEADERS = {**signin.HEADERS, "Cache-Control": "private, max-age=300"}


def rerankers_allowed() -> list[str]:
    allowed = []
    for name in rerankers.NAMES[1:]:
        try:
            allowlist.check_reranker(name)
        except errors.NotAllowed:
            continue
        allowed.append(name)
    return allowed


def _terms(query: str) -> set[str]:
    return set(keywords.terms(query))


def _marked(text: str, terms: set[str]) -> str:
    """``text`` with the private marks around each word a query term names."""
    text = text.replace(_OPEN, "").replace(_CLOSE, "")
    if not terms:
        return text

    def mark(m: re.Match[str]) -> str:
        word = m.group(0).lower()
        hit = word in terms or any(len(t) >= STEM and word.startswith(t) for t in terms)
        return f"{_OPEN}{m.group(0)}{_CLOSE}" if hit else m.group(0)
    return _WORD.sub(mark, text)


def _html(marked: str) -> Markup:
    return Markup(marked.replace(_OPEN, "<mark>").replace(_CLOSE, "</mark>"))


def chunk_html(text: str, terms: set[str]) -> Markup:
    """A chunk's text, its query words marked; runs of Markdown table rows drawn as tables, the
    rest kept as it reads (a PDF's lines are not Markdown: "1." or "*" there is no list)."""
    blocks: list[tuple[bool, list[str]]] = []
    for line in _marked(text, terms).split("\n"):
        is_row = bool(_TABLE_ROW.match(line))
        if blocks and blocks[-1][0] == is_row:
            blocks[-1][1].append(line)
        else:
            blocks.append((is_row, [line]))
    out = []
    for is_table, lines in blocks:
        if is_table and len(lines) >= 2:
            out.append(_markdown.render("\n".join(lines)))
        else:
            out.append(f'<div class="lines">{escape(chr(10).join(lines))}</div>')
    return _html("".join(out))


def _link(path: str, **params: Any) -> str:
    return f"{path}?{urlencode({k: v for k, v in params.items() if v not in (None, '')})}"


def _hits(config: catalog.CollectionConfig, form: SearchIn) -> list[dict[str, Any]]:
    options = SearchOptions(mode=form.mode, fusion=form.fusion, reranker=form.reranker)
    found = search(config, form.query, form.k, options=options)
    ids = sorted({h.doc_id for h in found})
    facts = {doc_id: dict(zip(("media_type", "original"), row))
             for doc_id, row in zip(ids, states.fields_of(config.name, ids, "media_type", "original") if ids else [])}
    terms = _terms(form.query)
    marked = _marks(config.name, form.query)
    out = []
    for h in found:
        fact = facts.get(h.doc_id, {})
        page = h.pages[0] if h.pages else None
        shown: dict[str, Any] = {"title": h.title or h.doc_id, "doc_id": h.doc_id, "score": h.score,
                                 "citation": citation(h.doc_id, h.pages, h.section),
                                 "context": h.context, "text": chunk_html(h.text, terms), "image": None,
                                 "original": None, "no_image": "", "chunk": h.chunk,
                                 "mark": marked.get((h.doc_id, f"text:{h.text}"))
                                 or marked.get((h.doc_id, f"chunk:{h.chunk}"), "")}
        if page is not None and fact.get("media_type") == page_images.PDF:
            if fact.get("original") == "kept":
                shown["image"] = _link("/search/page.png", collection=config.name, doc_id=h.doc_id, chunk=h.chunk,
                                       page=page)
                shown["original"] = _link("/search/original", collection=config.name, doc_id=h.doc_id) + f"#page={page}"
            else:
                shown["no_image"] = f"The page cannot be shown: its original is {fact.get('original') or 'not kept'}."
        out.append(shown)
    return out


def _marks(collection: str, query: str) -> dict[tuple[str, str], str]:
    """How the hits of this question were marked before: ``relevant`` or ``not``, by the chunk's
    text when the mark kept it (after a reindex cuts the document another way, a chunk number names
    another chunk: the mark follows the words), else by its number."""
    label = labels.get(collection, labels.label_id(query))
    if not label:
        return {}

    def where(g: dict[str, Any]) -> tuple[str, str]:
        return (g["doc_id"], f"text:{g['text']}") if g.get("text") else (g["doc_id"], f"chunk:{g.get('chunk')}")

    out = {where(g): "not" for g in label.get("not_relevant", [])}
    out.update({where(g): "relevant" for g in label.get("gold", [])})
    return out


def _form(params: dict[str, str]) -> SearchIn:
    """The URL's search, through the API's own model (its limits, its messages)."""
    values: dict[str, Any] = {"query": params.get("q", ""), "mode": params.get("mode") or "hybrid"}
    if params.get("k"):
        values["k"] = params["k"]
    for name in ("fusion", "reranker"):
        if params.get(name):
            values[name] = params[name]
    return SearchIn.model_validate(values)


@router.get("/search")
async def page(request: Request) -> Response:
    try:
        session = await run_in_threadpool(signin.current, request)
    except errors.Denied:
        return signin.page(then=str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""))
    principal = session.principal
    collections = sorted(await run_in_threadpool(auth.readable, principal))
    params = dict(request.query_params)
    chosen = params.get("collection") or (collections[0] if collections else "")
    context: dict[str, Any] = {"who": session.who(), "csrf": session.csrf, "collections": collections,
                               "chosen": chosen, "params": params, "rerankers": rerankers_allowed(),
                               "fleet": principal.collection == "*", "hits": None, "error": "", "took_ms": None,
                               "can_label": False, "labelled": 0}
    status = 200
    if params.get("q"):
        try:
            if chosen not in collections:
                raise errors.Denied(403, "this token may not read that collection")
            form = _form(params)
            if form.reranker and form.reranker in rerankers.NAMES:
                allowlist.check_reranker(form.reranker)
            config = await run_in_threadpool(catalog.load, chosen)
            context["hits"] = await run_in_threadpool(_hits, config, form)
            context["can_label"] = principal.allows(chosen, "write")
            context["labelled"] = await run_in_threadpool(labels.count, chosen)
        except ValidationError as e:
            status, context["error"] = 422, "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
        except errors.Denied as e:
            status, context["error"] = e.status, str(e)
        except (errors.CollectionError, errors.ProviderUnavailable, errors.ProviderRefused) as e:  # as the API answers
            status, context["error"] = e.http_status, str(e)
        except ValueError as e:  # an unknown reranker, say
            status, context["error"] = 422, str(e)
    body = templates.render("search.html", **context)
    return HTMLResponse(body, status_code=status, headers=signin.HEADERS)


SEARCH_FIELDS = ("collection", "q", "k", "mode", "fusion", "reranker")


@router.post("/search/label")
async def label(request: Request) -> Response:
    """A hit marked relevant or not for the page's question (``verdict``: relevant | not), by a
    session that may write the collection, with its CSRF token. Answers 204 to the page's script,
    else sends the browser back to the same search."""
    form = parse_qs((await http_guard.read_body(request)).decode("utf-8", "replace"))
    field = {k: (v or [""])[0] for k, v in form.items()}
    if not await run_in_threadpool(signin.csrf_sent, request, form):
        raise errors.Denied(403, "missing or wrong CSRF token")
    session = await run_in_threadpool(signin.current, request)
    collection = field.get("collection", "")
    auth.authorize(session.principal, collection, "write")
    verdict = field.get("verdict")
    if verdict not in ("relevant", "not"):
        raise HTTPException(422, "verdict must be relevant or not")
    hit = {"doc_id": field.get("doc_id", ""), "chunk": _number(field.get("chunk", ""), "chunk")}
    config = await run_in_threadpool(catalog.load, collection)
    await run_in_threadpool(lambda: labelling.add(
        config, field.get("q", ""), [hit] if verdict == "relevant" else [], source="person", by=session.who(),
        not_relevant=[hit] if verdict == "not" else []))
    if request.headers.get("x-requested-with") == "situate":  # the page's script: the new count, no reload
        return JSONResponse({"labelled": await run_in_threadpool(labels.count, collection)}, headers=signin.HEADERS)
    back = _link("/search", **{k: field.get(k) for k in SEARCH_FIELDS})
    return RedirectResponse(back, status_code=303, headers=signin.HEADERS)


@router.get("/search.js")
def script(request: Request) -> Response:
    signin.current(request)  # for a signed-in page only, as every route but the health check
    return Response((templates.ASSETS / "search.js").read_text(), media_type="text/javascript", headers=signin.HEADERS)


def _asked(request: Request, *names: str) -> tuple[catalog.CollectionConfig, list[str]]:
    """The session's collection and the query's ``names``: the session is checked first, so a
    stranger learns nothing of a route's parameters (401 before any 422)."""
    session = signin.current(request)
    collection = request.query_params.get("collection", "")
    auth.authorize(session.principal, collection, "read")
    values = [request.query_params.get(n, "") for n in names]
    return catalog.load(collection), values


def _number(value: str, what: str) -> int:
    if not value.isdigit() or len(value) > 9:
        raise HTTPException(422, f"{what} must be a whole number")
    return int(value)


@router.get("/search/page.png")
async def page_image(request: Request) -> Response:
    """The page a hit cites, its chunk marked (``page_images``): ``?collection&doc_id&chunk[&page]``."""
    config, (doc_id, chunk, page) = await run_in_threadpool(_asked, request, "doc_id", "chunk", "page")
    try:
        drawn = await run_in_threadpool(page_images.image, config, doc_id, _number(chunk, "chunk"),
                                        _number(page, "page") if page else None)
    except page_images.NoPageImage as e:
        return Response(str(e), status_code=404, media_type="text/plain", headers=signin.HEADERS)
    return Response(drawn.png, media_type="image/png", headers={**IMAGE_HEADERS, "X-Marked-Lines": str(drawn.marked)})


@router.get("/search/original")
async def original(request: Request) -> Response:
    """The file itself, kept at extraction, for the browser's own viewer (``#page=60``):
    ``?collection&doc_id``."""
    config, (doc_id,) = await run_in_threadpool(_asked, request, "doc_id")
    try:
        media_type, data = await run_in_threadpool(page_images.original_of, config, doc_id)
    except page_images.NoPageImage as e:
        return Response(str(e), status_code=404, media_type="text/plain", headers=signin.HEADERS)
    name = re.sub(r"[^\w.-]+", "_", doc_id.rsplit("/", 1)[-1])[:100] or "document"
    return Response(data, media_type=media_type,
                    headers={**IMAGE_HEADERS, "Content-Disposition": f'inline; filename="{name}"',
                             "X-Content-Type-Options": "nosniff"})
