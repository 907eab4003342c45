"""The LLM scheduler's pure parts: token calibration, the priority call pool, the long-document window."""

from __future__ import annotations

from tests.support import reread_environment


def test_token_estimate_is_calibrated_by_the_providers_counts():
    import random

    from workers.contextualizers.llm.ratelimit import TokenCalibration

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

    from workers.contextualizers.llm.callpool import CallPool

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


def test_a_long_document_is_read_as_its_opening_and_the_window_of_its_section():
    """Windows follow the sections (two levels), never pass the budget, cover every chunk once;
    every chunk of a window gets the same two cached parts, the opening shared by all."""
    from workers.chunks.splitting import Chunk
    from workers.contextualizers import windows
    from workers.contextualizers.base import SourceDocument
    from workers.contextualizers.llm.scheduler import LLMContextualizer
    from workers.storage.catalog import CollectionConfig

    sections = ["PART I › Item 1. Business"] * 5 + ["PART II › Item 7. MD&A › Results"] * 9 + \
               ["PART II › Item 7. MD&A › Liquidity"] * 3 + ["PART II › Item 8. Financial Statements"] * 4
    chunks, text = [], ""
    for n, section in enumerate(sections):
        body = f"<c{n}> " + "word " * 98
        chunks.append(Chunk(n, body, len(text), len(text) + len(body), (n + 1, n + 1), section))
        text += body
    tokens = lambda t: len(t.split())  # noqa: E731 - a word a token, for the test
    plan = windows.plan(text, chunks, tokens, opening_tokens=250, window_tokens=400)
    assert "<c0>" in plan.opening and "<c1>" in plan.opening and "<c2>" not in plan.opening
    covered = [n for w in plan.windows for n in w.chunks]
    assert covered == list(range(len(chunks)))
    assert all(sum(tokens(chunks[n].text) for n in w.chunks) <= 400 for w in plan.windows)
    assert [w.title for w in plan.windows] == ["PART I › Item 1. Business"] * 2 + ["PART II › Item 7. MD&A"] * 3 + \
        ["PART II › Item 8. Financial Statements"]
    assert plan.windows[2].chunks == (5, 6, 7, 8)  # Item 7's subsections share its windows

    config = CollectionConfig(name="c", contextualizer="anthropic", model="claude-haiku-5-5")
    ctx = LLMContextualizer(config, provider=None, scope="test")  # prompts only: no call is made
    doc = SourceDocument("c", "long", "v", text, "text", {}, chunks)
    first, second, later = (ctx._prompt(doc, chunks[n], long_doc=True) for n in (5, 6, 18))
    assert first.cached == second.cached and first.cached != later.cached
    assert first.parts[0] == later.parts[0]  # the opening: one cache entry for the document
    assert "<c5>" in first.parts[1] and "<c18>" not in first.parts[1] and "<c18>" in later.parts[1]
    assert "<c6>" in second.instruction and [bp for _, bp in second.blocks()] == [True, True]


def test_a_llama_cpp_built_for_amx_is_refused_with_the_remedy(monkeypatch):
    import pytest

    from workers import settings
    from workers.contextualizers.llama import check_build
    from workers.errors import LocalLLMError

    baseline = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | OPENMP = 1 |"
    native = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | OPENMP = 1 |"
    check_build(baseline)
    check_build(baseline.replace("BMI2", "AVX512 = 1 | BMI2"))  # AVX-512 alone ran the same prompt
    with pytest.raises(LocalLLMError, match="GGML_NATIVE=OFF"):
        check_build(native)
    monkeypatch.setenv("SITUATE_LLAMA_ALLOW_AMX", "1")
    settings.get_settings.cache_clear()
    try:
        check_build(native)
    finally:
        settings.get_settings.cache_clear()


def test_the_model_table_knows_current_prices_tiers_and_end_of_life(monkeypatch):
    import datetime
    import importlib

    from workers import models

    haiku = models.get("claude-haiku-5-5")
    assert models.DEFAULT_MODEL == "claude-haiku-5-5" and models.get("anthropic.claude-haiku-5-5") is haiku
    # Haiku 5.5: a prompt over 100k tokens pays the higher rates on every token.
    assert models.cost_usd(haiku, 1_000_000, 0, 0, 0) == 0.10 * 1_000_000 / 1e6 * 5  # one 1M prompt: long rates
    assert models.cost_usd(haiku, 50_000, 0, 0, 1000) == (50_000 * 0.10 + 1000 * 0.50) / 1e6
    sonnet = models.get("claude-sonnet-5-5")
    assert models.cost_usd(sonnet, 0, 0, 1_000_000, 0) == 0.10  # cache reads at 0.05x since 2026-10-07
    assert models.lifecycle_note(models.get("claude-sonnet-4-5"), datetime.date(2026, 11, 30))[0] == "retired"
    assert models.lifecycle_note(models.get("claude-opus-4-5"), datetime.date(2026, 11, 30))[0] == "deprecated"
    assert models.lifecycle_note(haiku)[0] == "active"
    # An operator adds a model, or corrects ours, without a release.
    monkeypatch.setenv("SITUATE_MODELS", '{"claude-new-6": {"input": 1.5, "output": 7.5, "min_cacheable_tokens": 1024}, '
                                         '"claude-haiku-5-5": {"min_cacheable_tokens": 4096}}')
    reread_environment()
    reloaded = importlib.reload(models)
    try:
        assert reloaded.get("claude-new-6").output == 7.5 and reloaded.get("claude-haiku-5-5").min_cacheable_tokens == 4096
    finally:
        monkeypatch.delenv("SITUATE_MODELS")
        reread_environment()
        importlib.reload(models)


def test_a_model_your_own_servers_answer_to_raises_no_end_of_life_alarm():
    from producers.web import fleet
    from workers.storage.catalog import CollectionConfig

    served = CollectionConfig(name="own", contextualizer="openai", model="qwen2-5-coder-1-5b-instr")
    assert fleet.model_status(served, 91) is None  # not "unknown model … move it with None"
    mistyped = fleet.model_status(CollectionConfig(name="c", contextualizer="anthropic", model="claude-nope-1"), 1)
    assert mistyped is not None and mistyped["status"] == "unknown"
