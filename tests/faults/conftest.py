"""Fault tests: real worker processes, a Redis server of their own (``private_redis``: one test
restarts it), ops/up's OpenSearch (one test stops a node of its own instead), the stand-in LLM —
and a fault in the middle of each run. Every run is audited the same way
(``audit``): each document indexed once, at its last version, with all its chunks; no
duplicate chunk; no chunk of a stale version; and how many LLM calls were paid twice. The
figures are printed at the end of the session (``figures.py``)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field

import pytest

from ops.harness import LOGS, ROOT, StandIn, Worker
from tests.faults import figures as fault_figures
from tests.support import SECRET_KEY, TEST_MODEL, redis_of_its_own, reread_environment


@pytest.fixture(scope="session", autouse=True)
def services():
    from workers.connections import opensearch_client, redis_client

    try:
        redis_client().ping()
        opensearch_client().cluster.health()
    except Exception as e:
        pytest.fail(f"Redis/OpenSearch not reachable ({e}); run ops/up first (ops/test does)", pytrace=False)
    yield


@pytest.fixture(scope="module", autouse=True)
def private_redis(tmp_path_factory):
    """The fault runs' own Redis (broker and state): one of them restarts it, and none of their
    workers may take another test's messages, in this pytest process or a parallel one."""
    with redis_of_its_own(tmp_path_factory, "fault-redis") as server:
        yield server


# ~0.3 s per call: enough calls in flight at any moment for a fault to land on some.
LATENCY = {"base_latency_s": 0.25, "uncached_s_per_ktok": 0.05, "read_s_per_ktok": 0.0, "output_s_per_tok": 0.002}


@pytest.fixture(scope="module")
def standin():
    from workers.embedding import registry

    server = StandIn(LATENCY)
    # This process embeds queries with the stand-in's Voyage too; put everything back after.
    saved = {k: os.environ.get(k) for k in ("VOYAGE_API_KEY", "VOYAGE_BASE_URL")}
    os.environ.update({"VOYAGE_API_KEY": SECRET_KEY, "VOYAGE_BASE_URL": f"{server.url}/v1"})
    reread_environment()
    registry.get.cache_clear()
    yield server
    server.close()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    reread_environment()
    registry.get.cache_clear()


class Fleet:
    """Worker processes that reach the stand-in for Claude and Voyage, prefork pools (a pool
    child can die on its own, as a native crash kills it)."""

    def __init__(self, standin: StandIn, **env: str):
        self.standin = standin
        self.env = {"ANTHROPIC_API_KEY": SECRET_KEY, "ANTHROPIC_BASE_URL": standin.url,
                    "VOYAGE_API_KEY": SECRET_KEY, "VOYAGE_BASE_URL": f"{standin.url}/v1",
                    "SITUATE_RATE_LIMITS": json.dumps({TEST_MODEL: {"rpm": 10**6, "itpm": 10**9, "otpm": 10**9}}),
                    "SITUATE_PLUGINS": "tests.faults.plugins", "PYTHONPATH": str(ROOT),
                    "SITUATE_PROVIDER_MAX_ATTEMPTS": "30", **env}
        self.workers: list[Worker] = []

    def start(self, n: int = 2, concurrency: int = 3) -> Fleet:
        for _ in range(n):
            self.workers.append(Worker(concurrency, env=self.env, name=f"fault-{uuid.uuid4().hex[:6]}"))
        return self

    def stop(self) -> None:
        for w in self.workers:
            w.stop()

    def exited_on_their_own(self) -> list[str]:
        return [why for w in self.workers if (why := w.exited_on_its_own())]


# The fleets of the running test: ``wait_done`` stops waiting as soon as one of their workers
# has exited on its own (the run would stall, or finish on the others and hide it).
RUNNING: list[Fleet] = []


def workers_gone() -> list[str]:
    return [why for f in RUNNING for why in f.exited_on_their_own()]


@pytest.fixture
def fleet(standin):
    def make(**env: str) -> Fleet:
        RUNNING.append(Fleet(standin, **env))
        return RUNNING[-1]

    yield make
    gone = workers_gone()
    for f in RUNNING:
        f.stop()
    RUNNING.clear()
    assert not gone, "a worker exited during the run:\n" + "\n".join(gone)


@pytest.fixture
def collection_name():
    name = f"f-{uuid.uuid4().hex[:10]}"
    yield name
    from workers import lifecycle
    from workers.storage import catalog

    try:
        if catalog.exists(name):
            lifecycle.delete(name)
    except Exception:  # a fault test may leave a service down on failure; the audit said why
        pass


def documents(n: int, chunks: int = 4, words: int = 60, tag: str = "v1", marker: dict[int, str] | None = None) -> list[dict]:
    """``n`` documents of ``chunks`` pre-made chunks; ``tag`` makes versions differ."""
    out = []
    for d in range(n):
        parts = [f"Document {d} part {i} ({tag}). " + " ".join(f"w{d}x{i}y{j}" for j in range(words))
                 + (marker or {}).get(d, "") + "\n\n" for i in range(chunks)]
        out.append({"id": f"doc-{d:03d}", "text": "".join(parts), "chunks": parts})
    return out


def submit(collection: str, docs: list[dict], **settings) -> list:
    from producers.ingest.submit import submit as submit_all
    from workers import lifecycle
    from workers.documents.validation import RawDocument

    config = lifecycle.ensure(collection, **settings)
    raws = [RawDocument(d["id"], d["text"], d.get("metadata") or {},
                        [{"n": i, "text": t} for i, t in enumerate(d["chunks"])]) for d in docs]
    return submit_all(config, raws)


@dataclass
class Pace:
    """How fast this run goes on this machine, measured before its fault: the deadlines after the
    fault are multiples of it, so a busy machine (or a slow one) gets longer ones, and a fault that
    stalls the pipeline still misses them by far (a lost message waits an hour, not seconds)."""

    seconds_per_document: float

    @classmethod
    def of_first(cls, collection: str, since: float, n: int = 5, timeout: float = 900) -> Pace:
        """Wait for ``n`` documents indexed (``since``: when they were submitted); their pace."""
        from tests.support import wait_until

        wait_until(lambda: _indexed(collection) >= n, timeout, f"the first {n} documents")
        return cls(max(0.05, (time.monotonic() - since) / n))

    def deadline(self, documents: int, extra_s: float = 0.0, slack: float = 4.0, floor_s: float = 120.0) -> float:
        """Seconds ``documents`` may take at ``slack`` times this pace, after ``extra_s`` (what the
        fault itself costs: a recovery time, a service down)."""
        return max(floor_s, extra_s + slack * documents * self.seconds_per_document)


def _indexed(collection: str) -> int:
    from redis.exceptions import ConnectionError as RedisDown

    from workers.storage import states

    try:
        return states.counts(collection).get("indexed", 0)
    except RedisDown:
        return 0


def wait_done(collection: str, doc_ids: list[str], timeout: float) -> float:
    """Seconds until every document is indexed or failed; fails the test at ``timeout``."""
    from redis.exceptions import ConnectionError as RedisDown

    from workers.storage import states

    started = time.monotonic()
    while True:
        try:
            docs = states.get_many(collection, doc_ids)
        except RedisDown:  # restarting, or reading its data back
            time.sleep(0.5)
            continue
        pending = [d for d, s in zip(doc_ids, docs) if s is None or s["state"] not in states.TERMINAL]
        if not pending:
            return time.monotonic() - started
        if gone := workers_gone():
            raise AssertionError(f"{len(pending)} documents pending, and a worker exited on its own:\n" + "\n".join(gone))
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{len(pending)} documents still pending after {timeout:.0f} s: {pending[:5]} "
                                 f"(states: {Counter(s['state'] if s else None for s in docs)}); logs in {LOGS}")
        time.sleep(0.5)


@dataclass
class Audit:
    documents: int
    indexed: int
    failed: dict[str, str]
    lost: int                      # neither indexed nor failed with a reason, or short of chunks
    duplicate_ids: int             # (doc_id, chunk) more than once in the index
    stale_chunks: int              # chunks of a version other than the document's last
    paid_twice: int                # LLM calls the stand-in billed twice for the same prompt
    requests: int
    notes: dict = field(default_factory=dict)


def audit(collection: str, expected: dict[str, tuple[str, int]], standin: StandIn | None = None) -> Audit:
    """``expected``: doc_id -> (version, chunks) the index must hold at the end."""
    from opensearchpy import helpers

    from workers.connections import opensearch_client
    from workers.storage import catalog, chunk_index, states

    config = catalog.load(collection)
    chunk_index.refresh(config)
    seen: Counter = Counter()
    per_doc: Counter = Counter()
    stale = 0
    for hit in helpers.scan(opensearch_client(), index=config.index_name, query={"query": {"match_all": {}}},
                            _source=["doc_id", "chunk", "version"], size=1000):
        s = hit["_source"]
        seen[(s["doc_id"], s["chunk"])] += 1
        if s["doc_id"] not in expected or s["version"] != expected[s["doc_id"]][0]:
            stale += 1
        else:
            per_doc[s["doc_id"]] += 1
    failed, indexed, lost = {}, 0, 0
    for doc_id, (version, chunks) in expected.items():
        doc = states.get(collection, doc_id) or {}
        if doc.get("state") == states.FAILED and doc.get("error"):
            failed[doc_id] = doc["error"]
        elif doc.get("state") == states.INDEXED and doc.get("indexed_version") == version \
                and per_doc[doc_id] == chunks == doc.get("chunks"):
            indexed += 1
        else:
            lost += 1
    stats = standin.stats() if standin else {}
    return Audit(len(expected), indexed, failed, lost, sum(n - 1 for n in seen.values() if n > 1), stale,
                 stats.get("paid_twice", 0), stats.get("requests", 0))


def expected_of(docs: list[dict]) -> dict[str, tuple[str, int]]:
    from workers.documents.identity import ChunkInput, content_version

    return {d["id"]: (content_version(d["text"], [ChunkInput(n=i, text=t) for i, t in enumerate(d["chunks"])]),
                      len(d["chunks"])) for d in docs}


def report(name: str, result: Audit, **figures) -> None:
    row = {"fault": name, **asdict(result), **figures}
    row["failed"] = {k: v[:160] for k, v in row["failed"].items()}
    fault_figures.record(row)


def audit_poisoned(name: str, collection: str, docs: list[dict], standin: StandIn, poison: str = "doc-007") -> Audit:
    """A run with one poison document, once every document is indexed or failed: the poison one
    failed with its process's death (SIGSEGV, SITUATE_MAX_DELIVERIES times); the others audited,
    reported as ``name``."""
    from workers.storage import states

    took = wait_done(collection, [d["id"] for d in docs], timeout=300)
    result = audit(collection, {k: v for k, v in expected_of(docs).items() if k != poison}, standin)
    failed = states.get(collection, poison)
    report(name, result, in_flight=0, seconds=round(took, 1), poison_error=failed["error"])
    assert failed["state"] == "failed" and "died 3 times" in failed["error"] and "SIGSEGV" in failed["error"]
    return result
