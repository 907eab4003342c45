"""Pure functions and static configuration: routing, ids, validation, chunking, Celery
settings, docker-compose. No services needed beyond what conftest checks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from workers.chunking import count_tokens, guess_language, locate, split
from workers.documents import BadDocument, chunk_id, content_version, decode_body, shard_for
from workers.search import rrf
from workers import structure

ROOT = Path(__file__).resolve().parents[1]


def test_shard_is_stable_and_spreads():
    assert shard_for("c", "doc-1", 8) == shard_for("c", "doc-1", 8)
    counts = Counter(shard_for("c", f"doc-{i}", 8) for i in range(4000))
    assert len(counts) == 8 and min(counts.values()) > 400
    assert shard_for("c", "a", 8) != shard_for("c", "b", 8) or shard_for("c", "a", 8) != shard_for("c", "c", 8)


def test_ids_and_versions_are_deterministic():
    assert chunk_id("c", "d", 3) == chunk_id("c", "d", 3) != chunk_id("c", "d", 4)
    assert chunk_id("c", "d", 3) != chunk_id("c2", "d", 3)
    assert content_version("hello") == content_version("hello") != content_version("hello!")


@pytest.mark.parametrize("raw, reason", [
    (b"", "empty"), (b" \n\t ", "empty"), (b"\x00\x01binary", "binary"),
    ("café".encode("latin-1"), "UTF-8"), (b"x" * 101, "over the limit"),
    (bytes(range(1, 32)) * 3, "binary"),
])
def test_bad_bodies_are_refused_with_a_reason(raw, reason):
    with pytest.raises(BadDocument, match=reason):
        decode_body(raw, max_bytes=100)


def test_good_body_decodes():
    assert decode_body("Grüße\n".encode(), max_bytes=100) == "Grüße\n"


def test_markdown_chunks_follow_headings_and_respect_size():
    text = "\n\n".join(f"# Part {i}\n\n" + " ".join(f"word{i}_{j}" for j in range(60)) for i in range(6))
    chunks = split(text, "markdown", 80, 0)
    assert len(chunks) >= 6
    assert all(count_tokens(c.text) <= 80 for c in chunks)
    assert all(text[c.start:c.end] == c.text for c in chunks)
    assert sum(c.text.startswith("# Part") for c in chunks) == 6  # every section starts a chunk


def test_code_chunks_keep_functions_whole():
    funcs = [f"def f{i}(x):\n" + "\n".join(f"    x = x + {j}  # step {j}" for j in range(8)) + "\n    return x\n"
             for i in range(10)]
    text = "\n\n".join(funcs)
    assert guess_language(text, {"path": "m.py"}) == "python"
    chunks = split(text, "python", 120, 0)
    for c in chunks:
        assert c.text.count("def ") == c.text.count("return x"), "a function was cut in two"


def test_overlap_makes_neighbours_share_text():
    text = " ".join(f"token{i}" for i in range(400))
    chunks = split(text, "text", 60, 20)
    assert all(a.end > b.start for a, b in zip(chunks, chunks[1:]))


def test_prechunked_input_kept_exactly():
    text = "alpha beta gamma. alpha beta gamma."
    chunks = locate(text, [(5, "alpha beta gamma."), (9, "alpha beta gamma."), (11, "not in text")])
    assert [(c.n, c.text, c.start) for c in chunks] == [(5, "alpha beta gamma.", 0), (9, "alpha beta gamma.", 18),
                                                        (11, "not in text", None)]


def test_structural_paths_for_code_and_markdown():
    code = "class Store:\n    def put(self, key):\n        a = 1\n        return a\n"
    start = code.index("a = 1")
    chunk = locate(code, [(0, code[start:])])
    assert structure.code_paths(code, "python", chunk) == [["class Store", "function put"]]
    md = "# Guide\n\n## Install\n\nRun it.\n\n## Use\n\nCall it.\n"
    chunks = locate(md, [(0, "Run it."), (1, "Call it.")])
    assert structure.markdown_paths(md, chunks) == [["Guide", "Install"], ["Guide", "Use"]]
    assert structure.title_of("/* Copyright 2020 X\n * Licensed MIT */\npackage a.b;\n", {}) == "package a.b;"


def test_rrf_rewards_agreement():
    def hit(i):
        return {"_id": i, "_source": {"doc_id": i, "chunk": 0, "text": i}}
    fused = rrf({"bm25": [hit("a"), hit("b")], "dense": [hit("d"), hit("b")]})
    assert fused[0].doc_id == "b"  # second on both sides beats first on one
    assert fused[0].score == pytest.approx(2 / 62) and fused[0].ranks == {"bm25": 2, "dense": 2}
    assert {h.doc_id for h in fused[1:]} == {"a", "d"}


def test_big_documents_are_situated_first():
    from workers.app import situate_priority

    levels = [situate_priority(n) for n in (1, 2, 5, 16, 83, 10_000)]
    assert levels == sorted(levels, reverse=True) and levels[0] == 9 and levels[-1] == 0


def test_celery_is_json_only_and_at_least_once():
    from workers.app import all_queues, app
    from workers.settings import get_settings

    c = app.conf
    assert c.accept_content == ["json"] and c.task_serializer == "json"
    assert c.task_acks_late and c.task_reject_on_worker_lost and c.worker_prefetch_multiplier == 1
    assert c.broker_transport_options["visibility_timeout"] > c.task_time_limit
    assert all_queues() == ["ingest"] + [f"situate.{i}" for i in range(get_settings().shards)] + ["index"]


def test_docker_compose_matches_ops():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert {"redis", "opensearch", "worker", "api"} <= set(services)
    assert "appendonly yes" in " ".join(map(str, services["redis"]["command"]))
    assert "noeviction" in " ".join(map(str, services["redis"]["command"]))
    for name in ("worker", "api"):
        env = services[name]["environment"]
        assert env["SITUATE_REDIS_URL"].startswith("redis://redis:6379")
        assert env["SITUATE_OPENSEARCH_URL"] == "http://opensearch:9200"
    assert "situate worker" in " ".join(services["worker"]["command"]) if isinstance(services["worker"]["command"], list) \
        else "situate worker" in services["worker"]["command"]


def test_rate_limiter_is_shared_and_429_penalties_do_not_add_up():
    import time
    import uuid

    from workers.models import Limits
    from workers.ratelimit import RateLimiter

    scope = uuid.uuid4().hex
    a, b = RateLimiter(scope, Limits(rpm=120, itpm=10**6, otpm=10**6), burst_s=1.0), \
        RateLimiter(scope, Limits(rpm=120, itpm=10**6, otpm=10**6), burst_s=1.0)
    t0 = time.monotonic()
    for limiter in (a, b, a, b, a, b):  # capacity 2, then 2 per second, whoever asks
        limiter.acquire(10, 10)
    assert 1.7 < time.monotonic() - t0 < 3.0
    for _ in range(5):  # five workers told "retry after 1 s" at once: still about 1 s
        a.penalize(1.0)
    t0 = time.monotonic()
    b.acquire(10, 10)
    assert 0.8 < time.monotonic() - t0 < 1.6


def test_rate_limiter_settles_a_request_larger_than_its_bucket_as_the_provider_charges_it():
    """The provider charges such a request the whole bucket (no more); settling the unclipped
    estimate against it used to refund tokens the provider never gave back: 429s followed."""
    import uuid

    import pytest

    from workers.models import Limits
    from workers.ratelimit import RateLimiter

    limiter = RateLimiter(uuid.uuid4().hex, Limits(rpm=6000, itpm=600, otpm=10**6), burst_s=1.0)  # 10 tokens, 10/s
    taken = limiter.acquire(50, 1)
    assert taken.input_tokens == 10
    limiter.settle(taken, 40, 1)  # real usage also over the bucket: charged 10 by the provider too
    with pytest.raises(TimeoutError):  # the bucket is empty: 8 tokens need ~0.8 s of refill
        limiter.acquire(8, 1, deadline_s=0.3)
    limiter.settle(limiter.acquire(8, 1, deadline_s=5), 2, 1)  # a small one, refunded down to 2


def test_rate_limiter_does_not_trust_worker_clocks(monkeypatch):
    """A worker whose clock reads behind (descheduled between reading it and the script
    running) must not make the bucket refill the same seconds twice."""
    import time
    import uuid

    import pytest

    from workers.models import Limits
    from workers.ratelimit import RateLimiter

    limiter = RateLimiter(uuid.uuid4().hex, Limits(rpm=6000, itpm=600, otpm=10**6), burst_s=1.0)  # 10 tokens, 10/s
    limiter.acquire(10, 1)  # drained
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 5.0)  # this worker lags 5 s
    with pytest.raises(TimeoutError):
        limiter.acquire(10, 1, deadline_s=0.05)
    monkeypatch.setattr(time, "time", real)
    with pytest.raises(TimeoutError):  # still ~1 s of refill away, not refilled by the lag
        limiter.acquire(10, 1, deadline_s=0.3)


def test_token_estimate_is_calibrated_by_the_providers_counts():
    import random

    from workers.ratelimit import TokenCalibration

    calibration, rng = TokenCalibration(), random.Random(3)
    ratios = [rng.gauss(0.78, 0.12) for _ in range(400)]  # the provider counts ~22% fewer, file by file
    for r in ratios[:200]:
        calibration.observe(1000, round(1000 * r))
    assert abs(calibration.mean - 0.78) < 0.05
    # Reservations cover most calls (so the shared bucket is rarely overdrawn) without
    # reserving for the worst case.
    covered = sum(calibration.reserve(1000) >= 1000 * r for r in ratios[200:]) / 200
    assert 0.85 <= covered < 1.0
    assert calibration.reserve(1000) < 1000 * (0.78 + 4 * 0.12)
    before = calibration.mean, calibration.var
    calibration.observe(10, 1)          # too small to say anything
    assert (calibration.mean, calibration.var) == before
    calibration.observe(1000, 100_000)  # an outlier moves it, boundedly (ratio clipped at 1.5)
    assert calibration.mean <= before[0] + 0.1 * (1.5 - before[0]) + 1e-9


def test_call_pool_serves_first_calls_ahead_of_fan_outs():
    """A document's first call must not queue behind other documents' fan-out calls."""
    import threading

    from workers.llm import CallPool

    pool, gate, order = CallPool(1), threading.Event(), []
    blocker = pool.submit(CallPool.REST, gate.wait)  # the pool's one thread is busy
    rest = [pool.submit(CallPool.REST, order.append, f"rest-{i}") for i in range(2)]
    cancelled = pool.submit(CallPool.REST, order.append, "cancelled")
    first = pool.submit(CallPool.FIRST, order.append, "first")
    assert cancelled.cancel()
    gate.set()
    for future in [blocker, *rest, first]:
        future.result(timeout=5)
    assert order == ["first", "rest-0", "rest-1"]
    assert isinstance(pool.submit(CallPool.REST, lambda: 1 / 0).exception(timeout=5), ZeroDivisionError)
