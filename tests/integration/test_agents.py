"""Agents and frameworks: the MCP tools (the SDK's own client, over Streamable HTTP on the API and
over stdio from ``situate mcp``) and the LangChain and LlamaIndex retrievers (their real
packages) give the API's hits for the cookbook collection, and a scoped token stays in scope."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import httpx
import pytest

from ops.harness import SITUATE, Api
from producers.evaluation.evaluate import load_queries
from producers.web import auth
from situate import SituateClient
from tests.support import COOKBOOK, cookbook_docs, run_cli

ADMIN = "agents-admin-token-0123456789"
SUBSET = 15
QUERIES = 20


@pytest.fixture(scope="module")
def collections(worker, tmp_path_factory):
    """The cookbook subset in one collection, one document in another; removed after."""
    from workers import lifecycle
    from workers.storage import catalog

    suffix = os.urandom(4).hex()
    cookbook, other = f"agents-cookbook-{suffix}", f"agents-other-{suffix}"
    path = tmp_path_factory.mktemp("agents") / "subset.json"
    path.write_text(json.dumps(cookbook_docs()[:SUBSET]))
    for name, source in ((cookbook, ["--format", "cookbook", str(path)]), (other, [str(_one_doc(path.parent))])):
        result = run_cli("ingest", "--collection", name, *source, "--json")
        assert result.returncode == 0, result.stderr
    yield cookbook, other
    for name in (cookbook, other):
        if catalog.exists(name):
            lifecycle.delete(name)


def _one_doc(folder):
    doc = folder / "other" / "secret-plans.md"
    doc.parent.mkdir()
    doc.write_text("# Secret plans\n\nThe other tenant's plans for the quarterly kernel scheduler rewrite.\n")
    return doc.parent


@pytest.fixture(scope="module")
def api(collections):
    server = Api(env={"SITUATE_API_TOKEN": ADMIN})
    yield server
    server.stop()
    assert ADMIN not in server.output()


@pytest.fixture(scope="module")
def queries(collections):
    return [q.query for q in load_queries(COOKBOOK / "evaluation_set.jsonl")][:QUERIES]


def api_hits(api, collection: str, query: str, k: int = 10, **kw: Any) -> list[dict[str, Any]]:
    with SituateClient(api.url, token=ADMIN) as client:
        return client.search(collection, query, k=k, **kw)


def ranked(hits: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(h["doc_id"], h["chunk"]) for h in hits]


# -- MCP -----------------------------------------------------------------------------------------

async def _mcp_session(target, work):
    from mcp import Client

    async with Client(target) as client:
        return await work(client)


def _http(api, token: str | None):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return streamable_http_client(f"{api.url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=60))


def _stdio(token_file=None):
    from mcp import StdioServerParameters

    args = ["mcp"] + (["--token-file", str(token_file)] if token_file else [])
    env = {k: v for k, v in os.environ.items() if k.startswith(("SITUATE_", "PATH", "HOME", "VOYAGE_"))}
    return StdioServerParameters(command=SITUATE, args=args, env=env)


async def _tour(client, cookbook: str, other: str, query: str) -> dict[str, Any]:
    """What a model would do: list the tools and collections, search, read around the first hit,
    and try the other collection."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    collections = (await client.call_tool("list_collections", {})).structured_content["collections"]
    found = await client.call_tool("search", {"collection": cookbook, "query": query, "k": 10})
    first = found.structured_content["hits"][0]
    around = await client.call_tool("read", {"collection": cookbook, "doc_id": first["doc_id"], "chunk": first["chunk"]})
    elsewhere = await client.call_tool("search", {"collection": other, "query": "secret plans", "k": 3})
    missing = await client.call_tool("search", {"collection": "no-such-collection", "query": "x"})
    return {"tools": tools, "collections": {c["name"]: c for c in collections}, "found": found,
            "around": around, "elsewhere": elsewhere, "missing": missing}


def _check_tour(tour: dict[str, Any], api, cookbook: str, other: str, query: str, scoped: bool) -> None:
    assert set(tour["tools"]) == {"search", "list_collections", "read"}
    description = tour["tools"]["search"].description
    assert cookbook in description and (other not in description) == scoped
    assert cookbook in tour["collections"] and tour["collections"][cookbook]["documents"] == SUBSET
    assert (other in tour["collections"]) != scoped
    found = tour["found"]
    assert not found.is_error
    # The same hits as the HTTP API's search route, in the same order, with the same fields.
    expected = api_hits(api, cookbook, query)
    assert ranked(found.structured_content["hits"]) == ranked(expected)
    assert set(found.structured_content["hits"][0]) == set(expected[0])
    assert [round(h["score"], 6) for h in found.structured_content["hits"]] == [round(h["score"], 6) for h in expected]
    assert expected[0]["doc_id"] in found.content[0].text  # and as text, with citations
    first = found.structured_content["hits"][0]
    chunks = tour["around"].structured_content["chunks"]
    assert first["chunk"] in [c["chunk"] for c in chunks] and len(chunks) >= 2
    assert next(c for c in chunks if c["chunk"] == first["chunk"])["text"] == first["text"]
    assert tour["elsewhere"].is_error == scoped
    if scoped:
        assert "not allowed" in tour["elsewhere"].content[0].text
    assert tour["missing"].is_error and "Traceback" not in tour["missing"].content[0].text


def test_mcp_over_http_gives_the_apis_hits_and_holds_a_tokens_scope(api, collections, queries):
    cookbook, other = collections
    scoped, _ = auth.create_token(cookbook, "read", "mcp-test")
    for token, is_scoped in ((ADMIN, False), (scoped, True)):
        tour = asyncio.run(_mcp_session(_http(api, token), lambda c: _tour(c, cookbook, other, queries[0])))
        _check_tour(tour, api, cookbook, other, queries[0], scoped=is_scoped)
    # No token, or a wrong one: refused before the SDK reads the request.
    for headers in ({}, {"Authorization": "Bearer not-a-token"}):
        response = httpx.post(f"{api.url}/mcp", headers={**headers, "Content-Type": "application/json",
                                                          "Accept": "application/json, text/event-stream"},
                              json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert response.status_code == 401


def test_mcp_over_stdio_acts_for_its_token_file_or_the_deployments_admin(api, collections, queries, tmp_path):
    cookbook, other = collections
    token_file = tmp_path / "token"
    token_file.write_text(auth.create_token(cookbook, "read", "mcp-stdio")[0] + "\n")
    tour = asyncio.run(_mcp_session(_stdio(token_file), lambda c: _tour(c, cookbook, other, queries[1])))
    _check_tour(tour, api, cookbook, other, queries[1], scoped=True)

    os.environ["SITUATE_API_TOKEN"] = ADMIN  # the deployment's admin, as the operator's shell has it
    try:
        tour = asyncio.run(_mcp_session(_stdio(), lambda c: _tour(c, cookbook, other, queries[1])))
    finally:
        os.environ.pop("SITUATE_API_TOKEN")
    _check_tour(tour, api, cookbook, other, queries[1], scoped=False)

    bad = tmp_path / "bad"
    bad.write_text("not-a-token")
    result = run_cli("mcp", "--token-file", str(bad))
    assert result.returncode == 2 and "unknown or revoked token" in result.stderr


# -- frameworks ----------------------------------------------------------------------------------

def test_langchain_and_llamaindex_retrievers_return_the_apis_top_10(api, collections, queries):
    from llama_index.core.schema import NodeWithScore

    from situate import LangChainRetriever, LlamaIndexRetriever

    cookbook, _ = collections
    langchain = LangChainRetriever(collection=cookbook, url=api.url, token=ADMIN, k=10)
    llamaindex = LlamaIndexRetriever(collection=cookbook, url=api.url, token=ADMIN, k=10)
    assert ADMIN not in repr(langchain) and ADMIN not in repr(llamaindex)
    for query in queries:
        expected = ranked(api_hits(api, cookbook, query))
        assert len(expected) == 10
        docs = langchain.invoke(query)
        assert [(d.metadata["doc_id"], d.metadata["chunk"]) for d in docs] == expected
        nodes = llamaindex.retrieve(query)
        assert len(nodes) == 10 and all(isinstance(n, NodeWithScore) for n in nodes)
        assert [(n.node.metadata["doc_id"], n.node.metadata["chunk"]) for n in nodes] == expected

    # Async, with k and filters passed through.
    query = queries[2]
    first_doc = api_hits(api, cookbook, query)[0]["doc_id"]
    expected = ranked(api_hits(api, cookbook, query, k=3, filters={"doc_id": first_doc}))
    docs = asyncio.run(langchain.ainvoke(query, k=3, filters={"doc_id": first_doc}))
    assert [(d.metadata["doc_id"], d.metadata["chunk"]) for d in docs] == expected
    filtered = LlamaIndexRetriever(collection=cookbook, url=api.url, token=ADMIN, k=3, filters={"doc_id": first_doc})
    nodes = asyncio.run(filtered.aretrieve(query))
    assert [(n.node.metadata["doc_id"], n.node.metadata["chunk"]) for n in nodes] == expected
    hit = docs[0]
    assert hit.page_content and hit.metadata["citation"].startswith(first_doc) and "context" in hit.metadata
