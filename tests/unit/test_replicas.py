"""The openai contextualizer's parts that need no service: which replica a document prefers, the
base URLs, what a server's usage says it read, the prompt's order, and who may use it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from workers import allowlist
from workers.contextualizers.llm import replicas
from workers.contextualizers.llm.openai_compatible import cached_tokens, messages
from workers.contextualizers.llm.providers import Prompt
from workers.contextualizers.llm.scheduler import LLMContextualizer
from workers.errors import ConfigurationError, NotAllowed


def fleet(n: int) -> list[replicas.Replica]:
    return replicas.parse(",".join(f"http://10.0.0.{i}:8000/v1" for i in range(1, n + 1)))


def first_choices(docs: list[str], pool: list[replicas.Replica]) -> dict[str, str]:
    return {d: pool[replicas.rank(d, pool)[0]].label for d in docs}


def test_losing_one_of_four_replicas_moves_only_its_documents_about_a_quarter() -> None:
    docs = [f"c/doc-{i}" for i in range(8000)]
    four = fleet(4)
    before = first_choices(docs, four)
    lost = four[2].label
    after = first_choices(docs, [r for r in four if r.label != lost])
    moved = {d for d in docs if before[d] != after[d]}
    assert moved == {d for d in docs if before[d] == lost}  # nothing else moves
    assert 0.22 < len(moved) / len(docs) < 0.28
    # and each moves to the replica it ranked second: the same place every worker would pick
    assert all(after[d] == four[replicas.rank(d, four)[1]].label for d in moved)


def test_adding_a_fifth_replica_moves_about_a_fifth_all_to_it() -> None:
    docs = [f"c/doc-{i}" for i in range(8000)]
    five = fleet(5)
    before, after = first_choices(docs, five[:4]), first_choices(docs, five)
    moved = [d for d in docs if before[d] != after[d]]
    assert all(after[d] == five[4].label for d in moved)
    assert 0.17 < len(moved) / len(docs) < 0.23


def test_base_urls_end_in_v1_and_are_named_without_credentials() -> None:
    [r] = replicas.parse(" https://user:secret@llm.invalid:8443/v1/ ")
    assert r.url == "https://user:secret@llm.invalid:8443/v1" and r.label == "https://llm.invalid:8443/v1"
    for bad in ("http://10.0.0.5:8000", "10.0.0.5:8000/v1", "http://a:1/v1,http://a:1/v1"):
        with pytest.raises(ConfigurationError):
            replicas.parse(bad)


def test_what_a_server_read_from_its_cache_or_that_it_said_nothing() -> None:
    vllm = SimpleNamespace(prompt_tokens=900, prompt_tokens_details=SimpleNamespace(cached_tokens=768))
    assert cached_tokens(vllm, SimpleNamespace(model_extra={})) == 768
    llama_cpp = SimpleNamespace(prompt_tokens=900, prompt_tokens_details=None)
    assert cached_tokens(llama_cpp, SimpleNamespace(model_extra={"timings": {"cache_n": 850}})) == 850
    ollama = SimpleNamespace(prompt_tokens=900, prompt_tokens_details=None)
    assert cached_tokens(ollama, SimpleNamespace(model_extra={})) is None
    zero = SimpleNamespace(prompt_tokens=900, prompt_tokens_details=SimpleNamespace(cached_tokens=0))
    assert cached_tokens(zero, SimpleNamespace(model_extra={})) == 0  # said, and nothing read: 0, not unknown


def test_the_document_comes_first_and_the_chunk_last() -> None:
    prompt = Prompt("<document>\nWHOLE\n</document>", True, "situate <chunk>PART</chunk>", key="c/d")
    system, user = messages(prompt)
    assert system["role"] == "system" and user["role"] == "user"
    assert user["content"].index("WHOLE") < user["content"].index("PART") and user["content"].endswith("</chunk>")
    windowed = Prompt("OPENING+WINDOW", True, "CHUNK", parts=("OPENING", "+WINDOW"))
    assert messages(windowed)[1]["content"].startswith("OPENING+WINDOW")


def test_openai_is_allowed_by_default_where_the_operator_set_the_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.settings import get_settings

    monkeypatch.delenv("SITUATE_ALLOWED_MODELS")  # the tests allow everything: back to the default list
    monkeypatch.delenv("SITUATE_OPENAI_BASE_URLS", raising=False)
    get_settings.cache_clear()
    with pytest.raises(NotAllowed):
        allowlist.check_contextualizer("openai", "qwen2.5-7b", True)
    monkeypatch.setenv("SITUATE_OPENAI_BASE_URLS", "http://10.0.0.1:8000/v1")
    get_settings.cache_clear()
    allowlist.check_contextualizer("openai", "qwen2.5-7b", True)  # any name the servers answer to
    monkeypatch.setenv("SITUATE_ALLOWED_MODELS", "keywords")  # the operator's own list wins
    get_settings.cache_clear()
    with pytest.raises(NotAllowed):
        allowlist.check_contextualizer("openai", "qwen2.5-7b", True)
    monkeypatch.undo()
    get_settings.cache_clear()


def test_the_best_possible_read_of_calls_that_read_nothing_is_their_prefix() -> None:
    """Round robin can send every call of a document to a replica that never saw it: nothing read,
    and the best possible is still what one shared cache would have served."""
    calls = [{"cache_write_tokens": 0, "cache_read_tokens": 0, "prefix_tokens": 3000} for _ in range(4)]
    assert LLMContextualizer._best_read({"doc": calls}, already_warm=False) == 3 * 3000
    calls[2]["cache_read_tokens"] = 3008  # one call that did read: the server's own figure wins
    assert LLMContextualizer._best_read({"doc": calls}, already_warm=False) == 3 * 3008


def test_a_file_of_code_a_server_of_8192_tokens_refused_is_read_in_windows() -> None:
    """The cookbook file (19,877 characters) a llama-server with 8,192 tokens a slot refused as
    11,562 tokens: its estimate for a model of your own servers must call it long, so it is read
    as its opening and windows. Claude's ratio called it 5,500 tokens, read whole."""
    from tests.support import cookbook_docs
    from workers import models
    from workers.storage.catalog import CollectionConfig

    text = next(d["content"] for d in cookbook_docs() if d["original_uuid"].startswith("1cb2aa70"))
    config = CollectionConfig(name="c", contextualizer="openai", model="qwen-own")
    situating = LLMContextualizer(config, SimpleNamespace(), "openai", models.served("qwen-own"))  # type: ignore[arg-type]
    assert situating.max_document_tokens < 8192
    assert models.estimate_tokens(text, situating.spec) > situating.max_document_tokens
    assert models.estimate_tokens(text, models.get("claude-haiku-4-5")) < situating.max_document_tokens


def test_a_redis_fault_is_not_the_models() -> None:
    """A Redis blip while a call takes or gives back its slot is retried as a store fault, not
    counted in the bill's 5xx column as the provider's."""
    import redis

    from workers import faults

    for error in (redis.exceptions.ConnectionError("Error 111 connecting to redis:6379"),
                  redis.exceptions.TimeoutError("Timeout reading from socket")):
        assert faults.classify(error) is None and faults.is_store_fault(error)
    assert faults.classify(ConnectionRefusedError("the model's server")).kind == "connection"


def test_a_server_written_two_ways_is_one_replica() -> None:
    """Case, the scheme's own port, doubled slashes, a name and the one address it resolves to:
    one server, one label (one set of slots in the fleet)."""
    same = ["http://127.0.0.1:8000/v1", "HTTP://LocalHost:8000/v1/", "http://localhost:8000//v1", "http://127.0.0.1:8000/v1/"]
    assert {replicas.label_of(u) for u in same} == {"http://127.0.0.1:8000/v1"}
    assert replicas.label_of("http://10.0.0.5:80/v1") == replicas.label_of("http://10.0.0.5/v1") == "http://10.0.0.5/v1"
    assert replicas.label_of("https://llm.invalid:443/v1") == "https://llm.invalid/v1"  # unresolved: kept as written
    assert replicas.label_of("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
    assert replicas.label_of("http://10.0.0.5:8000/v1") != replicas.label_of("http://10.0.0.5:8001/v1")
    with pytest.raises(ConfigurationError, match="twice"):
        replicas.parse("http://localhost:8000/v1,http://127.0.0.1:8000/v1")


def test_the_heartbeat_retires_unlisted_replicas_now_and_then_not_every_beat(monkeypatch) -> None:
    """A replica retires after a day unlisted: every worker looking every 10 s was round trips for nothing."""
    from workers.contextualizers.llm import replicas
    from workers.storage import replicas as store

    looked: list[float] = []
    monkeypatch.setattr(store, "retire_unlisted", lambda: looked.append(1) or [])
    monkeypatch.setattr(replicas, "_retired_at", None)
    clock = [1000.0]
    monkeypatch.setattr(replicas.time, "monotonic", lambda: clock[0])
    for _ in range(5):
        replicas.probe_due()
        clock[0] += 10
    assert len(looked) == 1
    clock[0] += replicas.RETIRE_EVERY_S
    replicas.probe_due()
    assert len(looked) == 2
