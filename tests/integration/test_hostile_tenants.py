"""A hostile tenant harms no one else (Security III), end to end: files uploaded to one
collection, a worker with a single process (the case where one file could hold everyone up),
and another collection's documents beside them. A Redis of this module's own, so what it
measures (memory, SCAN calls) is its own."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from ops.harness import RedisServer, Worker
from tests.documents import make
from tests.support import use_services, wait_until


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """A private Redis, and a worker of one process on it."""
    redis = RedisServer(tmp_path_factory.mktemp("redis"))
    try:
        with use_services(redis_url=redis.url()):
            worker = Worker(1, env={"SITUATE_REDIS_URL": redis.url()}, name=f"hostile-{uuid.uuid4().hex[:6]}")
            try:
                yield redis
            finally:
                worker.stop()
                _drop_all()
    finally:
        redis.stop()


def _drop_all() -> None:
    from workers import lifecycle
    from workers.storage import catalog

    for name in catalog.list_names():
        lifecycle.delete(name)


def _submit_file(collection: str, name: str, data: bytes):
    from producers.ingest.submit import submit
    from workers import lifecycle
    from workers.documents.validation import RawDocument

    config = lifecycle.ensure(collection, contextualizer="none")
    return submit(config, [RawDocument(name, data, {}, name=name)])[0]


def _state(collection: str, doc_id: str) -> dict:
    from workers.storage import states

    return states.get(collection, doc_id) or {}


def _ended(collection: str, doc_id: str) -> dict | None:
    found = _state(collection, doc_id)
    return found if found.get("state") in ("indexed", "failed") else None


def _name(kind: str) -> str:
    return f"t-{kind}-{uuid.uuid4().hex[:6]}"


def test_a_workbook_that_makes_its_parser_print_harms_no_other_collection(single, tmp_path):
    """The noisy workbook's print used to become the next reply: every later file on that worker
    process read the one before's answer (and could be given another tenant's text)."""
    noisy, books = _name("noisy"), _name("books")
    assert _submit_file(noisy, "noisy.xlsx", make.noisy_xlsx(tmp_path / "n.xlsx")).state == "queued"
    for i in range(3):
        data = make.xlsx(tmp_path / f"b{i}.xlsx", {"Orders": [["tenant", "document"], ["B", f"order book {i}"]]})
        assert _submit_file(books, f"book-{i}.xlsx", data.read_bytes()).state == "queued"
    bad = wait_until(lambda: _ended(noisy, "noisy.xlsx"), 120, "the noisy workbook")
    assert bad["state"] == "failed" and "XLSX: could not read the file" in bad["error"]
    for i in range(3):
        done = wait_until(lambda i=i: _ended(books, f"book-{i}.xlsx"), 120, f"book {i}")
        assert done["state"] == "indexed", done
    from workers.storage import catalog, chunk_index

    config = catalog.load(books)
    chunk_index.refresh(config)
    for i in range(3):
        text = " ".join(r["text"] for r in chunk_index.all_chunks(config, f"book-{i}.xlsx"))
        assert f"order book {i}" in text and all(f"order book {j}" not in text for j in range(3) if j != i)


def test_a_twelve_kilobyte_workbook_fails_alone_without_filling_redis(single):
    """One shared string of 10,000 emoji in 1,990 cells: 19.9 M characters passed a budget in
    characters, and took 805 MB of Redis as ASCII-escaped JSON, in the body store and again in
    the checkpoints."""
    from workers.connections import redis_client

    before = int(redis_client().info("memory")["used_memory"])
    collection, other = _name("emoji"), _name("plain")
    data = make.emoji_xlsx()
    assert len(data) < 12_000
    _submit_file(collection, "grins.xlsx", data)
    _submit_file(other, "note.csv", b"animal,count\nsea otter,12\n")
    failed = wait_until(lambda: _ended(collection, "grins.xlsx"), 180, "the emoji workbook")
    assert failed["state"] == "failed" and "bytes (SITUATE_MAX_EXTRACTED_BYTES)" in failed["error"], failed
    grew = int(redis_client().info("memory")["used_memory"]) - before
    assert grew < 100_000_000, f"Redis grew by {grew / 1e6:.0f} MB"
    assert wait_until(lambda: _ended(other, "note.csv"), 120, "the other collection's file")["state"] == "indexed"


def test_a_pdf_built_to_be_slow_fails_on_its_budget_while_another_collection_is_served(single):
    """2,000 pages of nested form XObjects, 340 KB: ~0.7 s of CPU a page, which held the only
    extraction slot for the whole 300 s while another collection's one-line document waited."""
    slow, quick = _name("slow"), _name("quick")
    uploaded = time.monotonic()
    _submit_file(slow, "slow.pdf", make.xobject_bomb(2000))
    _submit_file(quick, "note.md", b"# Kelp\n\nSea otters keep the kelp forest standing.\n")
    served = wait_until(lambda: _ended(quick, "note.md"), 90, "the other collection's document (90 s)")
    assert served["state"] == "indexed"
    failed = wait_until(lambda: _ended(slow, "slow.pdf"), max(1.0, 240 - (time.monotonic() - uploaded)),
                        "the slow PDF to fail (240 s from its upload)")
    assert failed["state"] == "failed" and "s of CPU, over the" in failed["error"], failed


def test_listing_collections_scans_nothing_however_many_keys_redis_holds(single):
    """``tools/list`` described the caller's collections from a SCAN of the whole database: 606
    SCAN calls over 6,294 keys. The catalog keeps a set of names now."""
    from mcp import Client

    from producers.web import auth, mcp_server
    from workers import lifecycle
    from workers.connections import redis_client

    names = [_name("listed") for _ in range(3)]
    for name in names:
        lifecycle.ensure(name, contextualizer="none")
    r = redis_client()
    pipe = r.pipeline(transaction=False)
    for i in range(6_000):
        pipe.set(f"someone-else:{i}", "x")
    pipe.execute()
    r.config_resetstat()
    server = mcp_server.build(mcp_server.Caller(auth.Principal("admin", "*", "admin", mcp_server.STDIO_ADMIN)))

    async def listed():
        async with Client(server) as client:
            return (await client.list_tools()).tools, (await client.call_tool("list_collections", {})).structured_content

    tools, collections = asyncio.run(listed())
    scans = int(r.info("commandstats").get("cmdstat_scan", {}).get("calls", 0))
    search = next(t for t in tools if t.name == "search")
    assert all(n in search.description for n in names) and {c["name"] for c in collections["collections"]} >= set(names)
    assert scans <= 10, f"{scans} SCAN calls to list collections"
    r.delete(*[f"someone-else:{i}" for i in range(6_000)])


def test_a_generation_never_takes_another_collections_index(single):
    """``acme-g2`` (a collection) and generation 2 of ``acme`` (a reindex) had the same index,
    ``situate-acme-g2``; acme's reindex and rollback deleted acme-g2's documents."""
    from producers.ingest.submit import submit, wait
    from workers import errors, lifecycle
    from workers.connections import opensearch_client
    from workers.documents.validation import RawDocument
    from workers.pipeline import rebuild
    from workers.storage import catalog, chunk_index, index_mapping

    acme = _name("acme")
    neighbour = lifecycle.ensure(f"{acme}-g2", contextualizer="none")
    first = lifecycle.ensure(acme, contextualizer="none")
    for config, text in ((neighbour, "The neighbour's own ledger of kelp sales."), (first, "Acme's note on otters.")):
        assert wait(config, submit(config, [RawDocument("doc", text, {})]), timeout=120)["doc"]["state"] == "indexed"
    rebuild.start(acme, chunk_tokens=64)
    shadow = catalog.load(catalog.shadow_name(acme, 2))
    assert shadow.index_name == f"situate-{acme}.g2" != neighbour.index_name
    wait_until(lambda: catalog.reindex_record(acme)["phase"] == "live", 120, "the reindex to switch")
    rebuild.rollback(acme)
    chunk_index.refresh(neighbour)
    assert chunk_index.count(neighbour, "doc") == 1  # the neighbour's index is untouched

    # An index that an earlier release's reindex named ``situate-<name>-g<n>`` is not taken either.
    legacy = _name("legacy")
    old = lifecycle.ensure(legacy, contextualizer="none").model_copy(
        update={"name": f"{legacy}~g2", "rebuilds": legacy, "index": "", "index_generation": 2, "collection_id": ""})
    assert old.index_name == f"situate-{legacy}-g2"
    body = index_mapping.mapping(old)
    del body["mappings"]["_meta"]["owner"]  # as that release wrote it
    opensearch_client().indices.create(index=old.index_name, body=body)
    with pytest.raises(errors.Conflict, match=f"belongs to collection '{legacy}'"):
        lifecycle.ensure(f"{legacy}-g2", contextualizer="none")
    assert not catalog.exists(f"{legacy}-g2")
    stray = catalog.CollectionConfig(name=f"{legacy}-g2", generation="x", collection_id="x")
    chunk_index.delete_index(stray)  # not its index: left alone
    assert chunk_index.owner_of(old.index_name) == {"collection": legacy, "id": None}
    chunk_index.delete_index(old)
    with pytest.raises(errors.BadName):
        catalog.validate_name(f"{legacy}\n")


def test_the_mcp_search_tool_takes_what_the_api_search_route_takes(single):
    """The MCP ``search`` tool had no query limit and untyped filters (a dict of anything)."""
    from mcp import Client

    from producers.web import auth, mcp_server
    from workers import lifecycle

    name = _name("mcp")
    lifecycle.ensure(name, contextualizer="none")
    server = mcp_server.build(mcp_server.Caller(auth.Principal("admin", "*", "admin", mcp_server.STDIO_ADMIN)))
    asks = {"a 10,000-character query": {"query": "q" * 10_000},
            "70,000 filter values": {"query": "q", "filters": {"doc_id": [str(i) for i in range(70_000)]}},
            "an object as a filter value": {"query": "q", "filters": {"lang": {"$ne": "x"}}}}

    async def ask():
        async with Client(server) as client:
            return {what: await client.call_tool("search", {"collection": name, **args}) for what, args in asks.items()}

    for what, result in asyncio.run(ask()).items():
        assert result.is_error and "internal error" not in result.content[0].text, (what, result.content[0].text)
