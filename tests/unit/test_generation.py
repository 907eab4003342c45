"""What is kept of a model's questions: a question, in its own words."""

from __future__ import annotations

from producers.evaluation import generation, pilot

CHUNK = ("Net sales in the fourth quarter of fiscal 2023 increased 11.1% to $3.2 billion, driven by strong "
         "demand across categories and new store openings.")


def test_a_question_that_copies_a_run_of_its_chunk_is_dropped() -> None:
    assert generation.copies("Why did net sales in the fourth quarter of fiscal 2023 increase?", CHUNK)
    assert generation.copies("fourth quarter fiscal net sales increased billion?", CHUNK)  # most content words
    assert not generation.copies("How much did revenue grow at the end of last year?", CHUNK)


def test_answers_are_cleaned_to_one_question() -> None:
    assert generation.cleaned('Question: "How much did revenue grow?" It is in the report.') == "How much did revenue grow?"
    assert generation.is_question("How much did revenue grow last year?")
    assert not generation.is_question("Revenue grew.")
    assert not generation.is_question("Why?")


def test_a_models_lead_in_is_taken_off() -> None:
    for said in ("Sure, here is a question: How much did revenue grow?", "Here's a question about the report: "
                 "How much did revenue grow?", "Certainly! Here is one: How much did revenue grow?"):
        assert generation.cleaned(said) == "How much did revenue grow?", said
    assert generation.cleaned("What does sure mean here?") == "What does sure mean here?"


def test_a_model_that_cannot_be_reached_ends_generation_at_the_first_chunk(monkeypatch) -> None:
    """Not each sampled chunk waiting out the patience in turn: one clear error."""
    import pytest

    from workers.errors import ProviderUnavailable
    from workers.storage.catalog import CollectionConfig

    chunks = [{"doc_id": f"d{i}", "chunk": 0, "text": CHUNK, "opening": ""} for i in range(120)]
    monkeypatch.setattr(generation, "sample", lambda config, count, seed=0, with_opening=True: chunks[:count])

    class Unreachable:
        model = "claude-test"
        calls = 0

        def write(self, system: str, user: str) -> tuple[str, dict]:
            Unreachable.calls += 1
            raise ProviderUnavailable("anthropic: connection refused, for 60 s")

    with pytest.raises(ProviderUnavailable, match="stopped after 1 of 120 chunks.*could not be reached"):
        generation.generate(CollectionConfig(name="c"), 120, Unreachable())
    assert Unreachable.calls == 1


def test_without_the_opening_the_model_reads_the_chunk_alone(monkeypatch) -> None:
    """``labels generate --no-opening``: the prompt the ranking check compares with the opening's."""
    from workers.storage import chunk_index, states
    from workers.storage.catalog import CollectionConfig

    document = [{"chunk": n, "text": f"part {n} " + CHUNK} for n in range(3)]
    monkeypatch.setattr(states, "doc_ids", lambda collection, state: ["d"])
    monkeypatch.setattr(chunk_index, "all_chunks", lambda config, doc_id: [dict(c) for c in document])
    monkeypatch.setattr(generation.labelling, "add", lambda *args, **kwargs: None)

    class Recording:
        model = "claude-test"
        asked: list[str] = []

        def write(self, system: str, user: str) -> tuple[str, dict]:
            Recording.asked.append(user)
            return "How big was the jump in quarterly revenue?", {}

    for with_opening in (True, False):
        Recording.asked = []
        generation.generate(CollectionConfig(name="c"), 3, Recording(), with_opening=with_opening)
        later = [p for p in Recording.asked if "part 0" not in p.split("<passage>")[1]]
        assert len(later) == 2 and all(("<document>" in p) == with_opening for p in later)


def test_the_pilot_draws_the_same_sample_every_time(tmp_path) -> None:
    for i in range(12):
        (tmp_path / f"note{i:02d}.md").write_text(f"# Note {i}\n\n" + "word " * (i + 1))
    (tmp_path / "photo.png").write_bytes(b"\x89PNG")
    first, second = pilot.sample(tmp_path, 5), pilot.sample(tmp_path, 5)
    assert first.paths == second.paths and len(first.paths) == 5 and first.files == 12
    assert all(rel.endswith(".md") for rel, _ in first.paths)
    assert 0 < first.sample_bytes < first.folder_bytes


def test_the_model_reads_the_documents_opening_before_the_chunk() -> None:
    chunks = [{"chunk": i, "text": f"part {i} " + "x" * 1000} for i in range(4)]
    opening = generation.opening(chunks, 3)
    assert opening.startswith("part 0") and "part 2" not in opening and len(opening) == generation.OPENING_CHARS
    assert generation.opening(chunks, 0) == ""
    asked = generation.question_prompt({"doc_id": "libafl/diff.rs", "chunk": 3, "text": CHUNK, "opening": opening})
    assert asked.index("part 0") < asked.index(CHUNK) and "libafl/diff.rs" in asked
    first = generation.question_prompt({"doc_id": "libafl/diff.rs", "chunk": 0, "text": CHUNK, "opening": ""})
    assert "<document>" not in first and CHUNK in first
