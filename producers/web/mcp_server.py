"""situate as Model Context Protocol tools, for agents: ``search``, ``list_collections`` and
``read``, on the official ``mcp`` SDK (2.x: ``MCPServer``).

Two transports, one set of tools. ``situate mcp`` speaks it over stdio (an MCP client starts it
as a command); the HTTP API serves it as Streamable HTTP at ``/mcp``. Either way the tools read
Redis and OpenSearch in-process, as the API does: no API URL, no second hop.

Who the caller is: on HTTP, the request's bearer token (``auth``: a token scoped to a collection
sees and searches that collection only, and is checked again on every call, so a revoked token
stops at once); on stdio, the token in ``--token-file``, or, without one, the deployment's admin
(the process has the deployment's credentials, as the CLI has). Tool descriptions are written
per caller: they name and describe only the collections the caller may read.

HTTP runs stateless with JSON answers: no session lives in an API process, so any number of API
processes behind a balancer serve it, at the price of server-to-client notifications (which
these tools never send). Errors are tool errors with a message: a caller's mistake says what to
fix, ours gives an id to find in the log, never a stack trace.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import importlib.metadata
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, ImageContent, TextContent
from pydantic import BaseModel, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from producers.retrieval import page_images
from producers.retrieval.hits import HitOut, SearchIn, SearchOut
from producers.retrieval.search import search as search_index
from producers.web import auth
from situate.citations import citation
from workers import errors
from workers.storage import catalog, chunk_index, states

log = logging.getLogger("situate.mcp")

MAX_K = 100
MAX_BODY_BYTES = 1 << 20  # a tool call is a few hundred bytes of JSON
MAX_READ = 50
DESCRIBED_COLLECTIONS = 20  # a tool description lists at most this many (list_collections has all)
STDIO_ADMIN = "stdio-admin"  # the credential of a stdio server started without a token: its process's

T = TypeVar("T")


class CollectionOut(BaseModel):
    name: str
    documents: int = Field(description="Documents indexed.")
    chunks: int = Field(description="Chunks indexed.")
    language: str
    contextualizer: str
    embedder: str
    examples: list[str] = Field(description="A few of its documents: titles or ids.")


class CollectionsOut(BaseModel):
    collections: list[CollectionOut]


class ChunkOut(BaseModel):
    chunk: int
    text: str
    context: str
    pages: list[int] | None = None
    section: str | None = None


class ReadOut(BaseModel):
    doc_id: str
    title: str | None
    chunks: list[ChunkOut]


class Caller:
    """How a tool call finds its principal: from the HTTP request's bearer token, or the one the
    stdio process started with (checked again on every call: a revoked token stops at once)."""

    def __init__(self, fixed: auth.Principal | None = None):
        self.fixed = fixed

    def __call__(self, ctx: Context | None) -> auth.Principal:
        if self.fixed is not None:
            if self.fixed.token != STDIO_ADMIN and not auth.still_valid(self.fixed):
                raise errors.Denied(401, "this token was revoked or its collection dropped")
            return self.fixed
        headers = ctx.headers if ctx is not None else None
        if headers is None:  # an HTTP server always has headers; this is not a request of ours
            raise errors.Denied(401, "missing bearer token")
        return auth.authenticate(headers.get("authorization"))


def _public(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """A tool's errors as the caller should see them: what to fix, or an id for the log."""
    @functools.wraps(fn)
    async def run(*args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except ToolError:
            raise
        except errors.Denied as e:
            raise ToolError(f"not allowed: {e}") from None
        except (errors.CollectionError, ValueError, errors.ProviderUnavailable, errors.ProviderRefused) as e:
            raise ToolError(str(e)) from None
        except Exception:
            error_id = uuid.uuid4().hex[:12]
            log.exception("MCP tool %s failed (error id %s)", fn.__name__, error_id)
            raise ToolError(f"internal error (id {error_id} in the server's log)") from None
    return run


def _examples(collection: str, n: int = 3) -> list[str]:
    ids = states.doc_ids(collection, state=states.INDEXED, limit=n)
    titles = [states.get(collection, d) or {} for d in ids]
    return [f"{t['title']} ({d})" if t.get("title") else d for d, t in zip(ids, titles)]


def describe_collection(name: str) -> CollectionOut:
    config = catalog.load(name)
    counts = states.counts(name)
    return CollectionOut(name=name, documents=counts.get(states.INDEXED, 0), chunks=chunk_index.count(config),
                         language=config.language, contextualizer=config.contextualizer,
                         embedder=config.embedder, examples=_examples(name))


def _catalogue(principal: auth.Principal) -> str:
    """The collections a caller may read, a line each: what a model chooses from."""
    lines, names = [], auth.readable(principal)
    for name in names[:DESCRIBED_COLLECTIONS]:
        try:
            c = describe_collection(name)
        except errors.CollectionError:
            continue  # dropped meanwhile
        examples = "; ".join(c.examples)
        lines.append(f"- {c.name}: {c.documents:,} documents, {c.language}" + (f", e.g. {examples}" if examples else ""))
    more = len(names) - DESCRIBED_COLLECTIONS
    if more > 0:
        lines.append(f"- and {more} more: see list_collections")
    return "\n".join(lines) or "- (none that this caller may read)"


SEARCH_DOC = """Search a situate collection: hybrid BM25 + vector search over chunks that an LLM (or the
offline default) situated in their whole document. Returns the best chunks with their citation:
the document, its pages ([first, last], 1-based) and section where the document has them, the
score, the chunk's text and its context. `filters` match documents' metadata exactly (a value or a
list of values), e.g. {"doc_id": "3M_2018_10K.pdf"}. Use `read` to see the chunks around a hit.

Collections:
"""


class SituateMCP(MCPServer):
    """The SDK's server with descriptions written per caller (see the module's docstring).
    ``_handle_list_tools`` is the 2.x SDK's handler of ``tools/list``, the one place that sees the
    request (its headers) when tools are listed; ``mcp<3`` in pyproject.toml keeps it there."""

    def __init__(self, caller: Caller):
        super().__init__(name="situate", version=importlib.metadata.version("situate"),
                         instructions="Search and read the document collections situate has "
                         "indexed. Start with list_collections if you do not know which one to search.")
        self.caller = caller

    # the SDK's own (private) hook, overridden as it is declared there
    async def _handle_list_tools(self, ctx, params):  # type: ignore[no-untyped-def]
        result = await super()._handle_list_tools(ctx, params)
        try:
            principal = self.caller(Context(request_context=ctx, mcp_server=self))
            catalogue = await anyio.to_thread.run_sync(_catalogue, principal)
        except errors.Denied:
            catalogue = "- (none: this request has no valid token)"
        for tool in result.tools:
            if tool.name == "search":
                tool.description = SEARCH_DOC + catalogue
        return result


def build(caller: Caller) -> SituateMCP:
    server = SituateMCP(caller)

    @server.tool(description=SEARCH_DOC)
    @_public
    async def search(collection: str, query: str, k: int = 10, filters: dict[str, Any] | None = None,
                     ctx: Context | None = None) -> Annotated[CallToolResult, SearchOut]:
        principal = caller(ctx)
        auth.authorize(principal, collection, "read")
        if not 1 <= k <= MAX_K:
            raise ToolError(f"k must be between 1 and {MAX_K}")
        try:  # the limits of the API's search route: query length, filter values and their types
            body = SearchIn.model_validate({"query": query, "k": k, "filters": filters})
        except ValidationError as e:
            first = e.errors()[0]
            raise ToolError(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None
        config = catalog.load(collection)
        hits = await anyio.to_thread.run_sync(lambda: search_index(config, body.query, body.k, body.filters))
        out = SearchOut(hits=[HitOut.of(h) for h in hits])
        lines = [f"{i}. {citation(h.doc_id, h.pages, h.section)} (chunk {h.chunk}, score {h.score:.3f})\n"
                 f"   {h.text[:600]}" for i, h in enumerate(out.hits, 1)]
        return CallToolResult(content=[TextContent(type="text", text="\n".join(lines) or "no hits")],
                              structured_content=out.model_dump(mode="json"))

    @server.tool()
    @_public
    async def list_collections(ctx: Context | None = None) -> CollectionsOut:
        """The collections this caller may search: their sizes, language, and a few of their documents."""
        principal = caller(ctx)

        def collect() -> CollectionsOut:
            found = []
            for name in auth.readable(principal):
                try:
                    found.append(describe_collection(name))
                except errors.CollectionError:
                    continue
            return CollectionsOut(collections=found)
        return await anyio.to_thread.run_sync(collect)

    @server.tool()
    @_public
    async def read(collection: str, doc_id: str, chunk: int | None = None, pages: list[int] | None = None,
                   around: int = 1, page_image: bool = False,
                   ctx: Context | None = None) -> Annotated[CallToolResult, ReadOut]:
        """Read a document around a hit: the chunk `chunk` with `around` chunks either side, or the
        chunks on `pages` ([first, last] or [page]), or, with neither, its first chunks. With
        `page_image`, also the image of the page the chunk is on (or the first of `pages`), the
        chunk marked on it: for a PDF whose original was kept, to check a table the text garbled."""
        principal = caller(ctx)
        auth.authorize(principal, collection, "read")
        config = catalog.load(collection)
        around = max(0, min(around, MAX_READ // 2))
        if pages is not None and not 1 <= len(pages) <= 2:
            raise ToolError("pages is [first, last] or [page]")
        span = (max(0, chunk - around), chunk + around) if chunk is not None else None
        page_span = (pages[0], pages[-1]) if pages else None
        if span is None and page_span is None:
            span = (0, 2 * around)
        found = await anyio.to_thread.run_sync(lambda: chunk_index.read(config, doc_id, span, page_span, MAX_READ))
        if not found:
            raise ToolError(f"no indexed chunk of {doc_id!r} there in collection {collection!r}")
        out = ReadOut(doc_id=doc_id, title=found[0].get("title"),
                      chunks=[ChunkOut(chunk=c["chunk"], text=c.get("text", ""), context=c.get("context", ""),
                                       pages=c.get("pages"), section=c.get("section")) for c in found])
        content: list[TextContent | ImageContent] = [TextContent(type="text", text=out.model_dump_json())]
        if page_image:
            shown = next((c for c in found if c["chunk"] == chunk), found[0])
            page = pages[0] if pages else None
            try:
                drawn = await anyio.to_thread.run_sync(lambda: page_images.image(config, doc_id, shown["chunk"], page))
            except page_images.NoPageImage as e:
                content.append(TextContent(type="text", text=f"no page image: {e}"))
            else:
                content.append(ImageContent(type="image", data=base64.b64encode(drawn.png).decode(), mime_type="image/png"))
        return CallToolResult(content=content, structured_content=out.model_dump(mode="json"))

    return server


def stdio_server(token: str | None) -> SituateMCP:
    """The server ``situate mcp`` runs: for the token given (Denied if it is not one), or for
    the deployment's admin."""
    principal = auth.authenticate(f"Bearer {token}") if token else auth.Principal("admin", "*", "admin", STDIO_ADMIN)
    return build(Caller(principal))


def http_server() -> SituateMCP:
    return build(Caller())


class HTTPEndpoint:
    """``/mcp`` on the API, an ASGI app. The bearer token is checked before the SDK reads the
    body (a stranger's request costs a header lookup); the SDK's own Host check is off because
    the API's guard already answers only loopback Hosts in open mode, and tokens otherwise.
    ``running`` is the API's lifespan part: the SDK's session manager runs once per instance,
    so each start of the app gets a new one."""

    def __init__(self) -> None:
        self._handler: StreamableHTTPASGIApp | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        server = http_server()
        server.streamable_http_app(stateless_http=True, json_response=True, max_request_body_size=MAX_BODY_BYTES,
                                   transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        async with server.session_manager.run():
            self._handler = StreamableHTTPASGIApp(server.session_manager)
            try:
                yield
            finally:
                self._handler = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        try:
            await run_in_threadpool(auth.authenticate, request.headers.get("authorization"))
        except errors.Denied as e:
            await JSONResponse({"detail": str(e)}, status_code=e.status,
                               headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
            return
        if self._handler is None:
            await JSONResponse({"detail": "starting"}, status_code=503, headers={"Retry-After": "1"})(scope, receive, send)
            return
        await self._handler(scope, receive, send)
