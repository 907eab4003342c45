"""Questions a language model writes about a collection's own chunks: labels to start measuring
with before anyone has written any (as RAGAS's and LlamaIndex's generators do).

Chunks are sampled spread over the documents (round robin over them, a seeded draw in each), long
enough to ask about. For each, the model is asked for one question a person searching the
documents would type, in their own words. It reads the document's opening first and the chunk last,
as situating does: a person searching a collection names what the document is about ("how is a
DiffExecutor created?"), which the chunk alone often does not say, and a model that sees only the
chunk asks in the chunk's terms, the questions a context has nothing to add to. The opening costs
``OPENING_CHARS`` more of input a question. A question that repeats the chunk's words — a run of
``COPIED_RUN`` words, or most of its content words — would flatter BM25 (it finds its own words)
and is dropped; so is an answer that is not a question. What is kept is stored as a label on its
chunk with ``"source": "generated"`` (``storage.labels``): generated sets overstate absolute scores
but rank systems fairly well, so ``situate eval`` reports them apart from a person's labels. What
the calls cost goes on the collection's bill, under a run of its own.

The model is the collection's (its contextualizer's), or one named: Claude through ``anthropic`` or
``bedrock``, your own servers through ``openai``, a GGUF file through ``llama``. It runs where the
command runs, so that is where its credentials (or ``SITUATE_OPENAI_BASE_URLS``,
``SITUATE_MODELS_DIR``) must be.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from producers.evaluation import labelling
from workers import models
from workers.contextualizers import keywords
from workers.errors import ConfigurationError, LLMError, ProviderRefused, ProviderUnavailable
from workers.storage import chunk_index, states
from workers.storage.catalog import CollectionConfig

SYSTEM = ("You write the questions people type into a search box to find information in a collection of "
          "documents. Answer with one question only.")
ASK = ("A passage from {where}:\n<passage>\n{chunk}\n</passage>\n\nWrite one question that someone searching these "
       "documents would type, whose answer is in this passage. Ask it the way a user would: in your own words, "
       "naming what they want to know, without copying phrases from the passage and without mentioning "
       "\"the passage\" or \"the document\". Answer with the question only.")
ASK_AFTER_OPENING = (
    "The beginning of {where}:\n<document>\n{opening}\n</document>\n\nA passage from further on in it:\n<passage>\n"
    "{chunk}\n</passage>\n\nWrite one question that someone searching a large collection of documents would type, "
    "whose answer is in this passage. They do not know which document holds the answer, so the question says what "
    "the document is about. Ask it in your own words, without copying phrases from the passage and without "
    "mentioning \"the passage\" or \"the document\". Answer with the question only.")
OPENING_CHARS = 1500    # of the document's text before the chunk, from its start
MIN_WORDS = 25          # a chunk shorter than this is not worth a question
COPIED_RUN = 5          # this many words in a row taken from the chunk: dropped
COPIED_SHARE = 0.8      # or this share of its content words
MAX_OUTPUT_TOKENS = 60
_WORD = re.compile(r"[^\W_]+")

NO_MODEL = ("no language model to write questions with: this collection's contextualizer is {name!r}. Name one: "
            "--contextualizer anthropic --model claude-haiku-5-5 (ANTHROPIC_API_KEY here), --contextualizer bedrock "
            "(AWS credentials), --contextualizer openai --model NAME (SITUATE_OPENAI_BASE_URLS, your own servers), "
            "or --contextualizer llama --model FILE.gguf (SITUATE_MODELS_DIR: offline, on this machine's CPU)")


class Writer(Protocol):
    model: str

    def write(self, system: str, user: str) -> tuple[str, dict[str, Any]]:
        """The model's answer and its usage (tokens, cost) for one question."""
        ...


@dataclass
class Generated:
    asked: int = 0
    kept: int = 0
    dropped_copied: int = 0
    dropped_not_a_question: int = 0
    failed: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0
    examples: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


LANGUAGE_MODELS = ("anthropic", "bedrock", "openai", "llama")


def writer(contextualizer: str, model: str) -> Writer:
    """The language model that writes the questions (``NO_MODEL`` says how to name one)."""
    if contextualizer in ("anthropic", "bedrock", "openai"):
        return _ApiWriter(contextualizer, model)
    if contextualizer == "llama":
        return _LlamaWriter(model)
    raise ConfigurationError(NO_MODEL.format(name=contextualizer))


class _ApiWriter:
    def __init__(self, contextualizer: str, model: str):
        from workers.contextualizers.llm.providers import AnthropicProvider, BedrockProvider

        if contextualizer == "openai":
            from workers.contextualizers.llm.openai_compatible import OpenAICompatibleProvider

            if not model:
                raise ConfigurationError("--model: the name your servers answer to")
            self.provider: Any = OpenAICompatibleProvider(model)
            self.spec = models.served(model)
        else:
            model = model or models.DEFAULT_MODEL
            self.spec = models.get(model)
            self.provider = AnthropicProvider(model) if contextualizer == "anthropic" else BedrockProvider(model)
        self.model, self.provider_name = model, contextualizer

    def write(self, system: str, user: str) -> tuple[str, dict[str, Any]]:
        from workers import faults
        from workers.contextualizers.llm.providers import Prompt

        answer = faults.call(lambda: self.provider.call(Prompt(None, False, user, system=system), MAX_OUTPUT_TOKENS, None),
                             self.provider_name, faults.GENERATION)
        cost = models.cost_usd(self.spec, answer.input_tokens, answer.cache_write_tokens, answer.cache_read_tokens,
                               answer.output_tokens)
        return answer.text, {"model": self.model, "input_tokens": answer.input_tokens, "cache_write_tokens": 0,
                             "cache_read_tokens": answer.cache_read_tokens, "output_tokens": answer.output_tokens,
                             "cost_usd": cost}


class _LlamaWriter:
    def __init__(self, model: str):
        from workers.contextualizers import llama
        from workers.storage.catalog import CollectionConfig as Config

        self.path = llama.model_path(Config(name="questions", contextualizer="llama", model=model))
        self.model = f"llama:{self.path.name}"

    def write(self, system: str, user: str) -> tuple[str, dict[str, Any]]:
        from workers.contextualizers import llama

        engine = llama.loaded(self.path)
        answer = engine.create_chat_completion([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                               max_tokens=MAX_OUTPUT_TOKENS, temperature=0.0)
        used = answer.get("usage") or {}
        return (answer["choices"][0]["message"].get("content") or ""), {
            "model": self.model, "input_tokens": used.get("prompt_tokens", 0), "cache_write_tokens": 0,
            "cache_read_tokens": 0, "output_tokens": used.get("completion_tokens", 0), "cost_usd": 0.0}


def sample(config: CollectionConfig, count: int, seed: int = 0, with_opening: bool = True) -> list[dict[str, Any]]:
    """``count`` chunks spread over the collection's indexed documents: round robin over the
    documents (in a seeded order), a seeded chunk of each that has enough words; each with its
    document's opening unless ``with_opening`` is false."""
    rng = random.Random(seed)
    doc_ids = sorted(states.doc_ids(config.name, states.INDEXED))
    rng.shuffle(doc_ids)
    pools: dict[str, list[dict[str, Any]]] = {}
    in_order: dict[str, list[dict[str, Any]]] = {}  # every chunk of a document, for its opening
    picked: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    while len(picked) < count and doc_ids:
        for doc_id in list(doc_ids):
            if len(picked) >= count:
                break
            if doc_id not in pools:
                in_order[doc_id] = chunk_index.all_chunks(config, doc_id)
                pools[doc_id] = [c for c in in_order[doc_id] if len(_WORD.findall(c.get("text", ""))) >= MIN_WORDS]
                rng.shuffle(pools[doc_id])
            pool = pools[doc_id]
            while pool and (doc_id, pool[-1]["chunk"]) in seen:
                pool.pop()
            if not pool:
                doc_ids.remove(doc_id)
                continue
            chunk = pool.pop()
            seen.add((doc_id, chunk["chunk"]))
            before = opening(in_order[doc_id], chunk["chunk"]) if with_opening else ""
            picked.append({**chunk, "doc_id": doc_id, "opening": before})
    return picked


def opening(chunks: list[dict[str, Any]], before: int) -> str:
    """The document's text from its start (``chunks`` in order) up to the chunk numbered ``before`` (left out),
    at most ``OPENING_CHARS``; empty for its first chunk."""
    parts: list[str] = []
    for c in chunks:
        if c["chunk"] >= before or sum(map(len, parts)) >= OPENING_CHARS:
            break
        parts.append(c.get("text", ""))
    return "\n".join(parts)[:OPENING_CHARS]


def question_prompt(chunk: dict[str, Any]) -> str:
    """What the model is asked about one sampled chunk: its document's opening first (when there is
    one before it), the chunk last."""
    where = f"\"{chunk.get('title') or chunk['doc_id']}\""
    text = chunk["text"][:6000]
    if chunk.get("opening"):
        return ASK_AFTER_OPENING.format(where=where, opening=chunk["opening"], chunk=text)
    return ASK.format(where=where, chunk=text)


# A model's lead-in before its question ("Sure, here is a question:", "Here's one about ...:").
LEAD_IN = re.compile(r"^(?:(?:sure|certainly|of course|okay|ok)\b[^:?]{0,60}?[:.!,]\s*)?"
                     r"(?:here(?:'s| is)\b[^:?]{0,80}:\s*)?", re.I)


def cleaned(answer: str) -> str:
    """The model's answer as one question: a lead-in ("Sure, here is a question:"), a label
    ("Question:"), quotes and anything after the first question mark taken off."""
    text = " ".join(answer.split())
    text = LEAD_IN.sub("", text)
    text = re.sub(r"^(question|q)\s*[:.]\s*", "", text, flags=re.I).strip(" \"'“”")
    return text.split("?")[0].strip(" \"'“”") + "?" if "?" in text else text


def copies(question: str, chunk: str) -> bool:
    """The question takes its words from the chunk: a run of ``COPIED_RUN`` of them, or most of
    its content words (what BM25 would find by the words alone)."""
    q = [w.lower() for w in _WORD.findall(question)]
    c = [w.lower() for w in _WORD.findall(chunk)]
    runs = {tuple(c[i:i + COPIED_RUN]) for i in range(len(c) - COPIED_RUN + 1)}
    if any(tuple(q[i:i + COPIED_RUN]) in runs for i in range(len(q) - COPIED_RUN + 1)):
        return True
    content = set(keywords.terms(question))
    return bool(content) and len(content & set(keywords.terms(chunk))) >= COPIED_SHARE * len(content)


def is_question(text: str) -> bool:
    words = len(_WORD.findall(text))
    return text.endswith("?") and 3 <= words <= 40


def generate(config: CollectionConfig, count: int, write: Writer, seed: int = 0,
             record: Callable[[str, int, dict[str, Any], float], None] | None = None,
             progress: Callable[[int], None] | None = None, with_opening: bool = True) -> Generated:
    """Up to ``count`` generated labels for ``config``; ``record(doc_id, chunk, usage, seconds)``
    puts each call on the bill; ``with_opening`` false asks about the chunk alone."""
    result = Generated()
    started = time.monotonic()
    for chunk in sample(config, count, seed, with_opening):
        result.asked += 1
        t0 = time.monotonic()
        try:
            answer, usage = write.write(SYSTEM, question_prompt(chunk))
        except ProviderUnavailable as e:  # unreachable past GENERATION's patience: the next chunk would wait as long
            raise ProviderUnavailable(f"generation stopped after {result.asked} of {count} chunks, {result.kept} questions "
                                      f"kept: {write.model} could not be reached ({e})") from None
        except (LLMError, ProviderRefused):  # this chunk's answer only
            result.failed += 1
            continue
        finally:
            if progress:
                progress(result.asked)
        if record is not None:
            record(chunk["doc_id"], chunk["chunk"], usage, time.monotonic() - t0)
        result.cost_usd += float(usage.get("cost_usd", 0.0))
        question = cleaned(answer)
        if not is_question(question):
            result.dropped_not_a_question += 1
            continue
        if copies(question, chunk["text"]):
            result.dropped_copied += 1
            continue
        labelling.add(config, question, [{"doc_id": chunk["doc_id"], "chunk": chunk["chunk"], "text": chunk["text"],
                                          "pages": chunk.get("pages")}], source="generated", by=write.model)
        result.kept += 1
        if len(result.examples) < 5:
            result.examples.append({"question": question, "doc_id": chunk["doc_id"], "chunk": chunk["chunk"]})
    result.seconds = round(time.monotonic() - started, 1)
    return result
