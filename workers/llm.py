"""LLM contextualizers (Anthropic Messages API, Bedrock Converse) and the scheduling that makes
prompt caching pay: per document, the first call alone; once its response has *started* (the
moment its cache entry becomes visible) the rest of the document's chunks in parallel, up to a
per-document and a per-worker bound. All of a document's calls are issued together, so they
sit well inside the cache TTL; documents too short for the model's cache minimum get no
breakpoint (a write would cost 1.25x for nothing) and fan out at once.

Long documents (over ``llm_max_document_tokens``): the first k chunks stand for the document
as the cached block, then the m chunks just before the current one, never a chunk twice.

Faults: 429 waits ``retry-after`` (and empties the shared request bucket so every worker
backs off); 529 backs off exponentially with jitter; other 5xx and connection errors retry;
any other 4xx, an empty or refused answer fail the chunk — and so the document, visibly.
"""

from __future__ import annotations

import itertools
import os
import queue
import random
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Protocol

from workers import models, prompts, usage
from workers.chunking import Chunk
from workers.collections import CollectionConfig
from workers.contextualizers import Context, SourceDocument
from workers.ratelimit import RateLimiter, TokenCalibration
from workers.settings import get_settings


class LLMError(RuntimeError):
    """A chunk that cannot be situated (after retries, or a permanent refusal)."""


class Fault(Exception):
    """A retryable provider answer: kind is http_429, http_529 or http_5xx."""

    def __init__(self, kind: str, retry_after: float | None = None, detail: str = ""):
        super().__init__(f"{kind}: {detail}"[:300])
        self.kind, self.retry_after = kind, retry_after


@dataclass
class Prompt:
    cached: str | None     # the document block; identical for every chunk of the document
    cache: bool            # put a breakpoint after it (False below the model's minimum)
    preceding: str | None  # long documents: the chunks just before this one
    instruction: str


@dataclass
class Answer:
    text: str
    stop_reason: str | None
    input_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    output_tokens: int


class Provider(Protocol):
    model: str

    def call(self, prompt: Prompt, max_tokens: int, on_started: Callable[[dict[str, int]], None] | None) -> Answer:
        """One attempt. With ``on_started`` (a warm-up call), calls it with the cache counters
        as soon as the response starts. Raises Fault for retryable answers, LLMError for
        permanent ones."""
        ...


class AnthropicProvider:
    """Messages API. A warm-up call is streamed, so the fan-out can begin at ``message_start``;
    the others are plain requests (less work per call)."""

    def __init__(self, model: str):
        import anthropic

        if not os.environ.get("ANTHROPIC_API_KEY") and not os.environ.get("ANTHROPIC_AUTH_TOKEN"):
            raise LLMError("ANTHROPIC_API_KEY is not set on this worker")
        self.anthropic = anthropic
        # Retries are ours: counted, shared with the limiter, and bounded in time.
        self.client = anthropic.Anthropic(max_retries=0, timeout=120.0)
        self.model = model

    @staticmethod
    def content(prompt: Prompt, ttl: str = "5m") -> list[dict[str, Any]]:
        """Document block first (with the breakpoint), then the chunk-specific blocks."""
        content: list[dict[str, Any]] = []
        if prompt.cached is not None:
            block: dict[str, Any] = {"type": "text", "text": prompt.cached}
            if prompt.cache:
                block["cache_control"] = {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}
            content.append(block)
        if prompt.preceding:
            content.append({"type": "text", "text": prompt.preceding})
        content.append({"type": "text", "text": prompt.instruction})
        return content

    def call(self, prompt: Prompt, max_tokens: int, on_started: Callable[[dict[str, int]], None] | None) -> Answer:
        a = self.anthropic
        content = self.content(prompt)
        text, stop, u_in, u_write, u_read, u_out = [], None, 0, 0, 0, 0
        try:
            if on_started is None:  # only a warm-up call needs to know when its response starts
                m = self.client.messages.create(model=self.model, max_tokens=max_tokens,
                                                messages=[{"role": "user", "content": content}])
                u = m.usage
                return Answer("".join(b.text for b in m.content if b.type == "text"), m.stop_reason,
                              u.input_tokens or 0, u.cache_creation_input_tokens or 0,
                              u.cache_read_input_tokens or 0, u.output_tokens or 0)
            stream = self.client.messages.create(model=self.model, max_tokens=max_tokens,
                                                 messages=[{"role": "user", "content": content}], stream=True)
            for event in stream:
                if event.type == "message_start":
                    u = event.message.usage
                    u_in, u_out = u.input_tokens or 0, u.output_tokens or 0
                    u_write = u.cache_creation_input_tokens or 0
                    u_read = u.cache_read_input_tokens or 0
                    on_started({"cache_write_tokens": u_write, "cache_read_tokens": u_read})
                elif event.type == "content_block_delta" and getattr(event.delta, "type", "") == "text_delta":
                    text.append(event.delta.text)
                elif event.type == "message_delta":
                    stop = event.delta.stop_reason
                    u_out = event.usage.output_tokens or u_out
        except a.RateLimitError as e:
            raise Fault("http_429", _retry_after(e.response), str(e)) from None
        except a.APIStatusError as e:
            status = getattr(e, "status_code", None) or 0
            if status == 529 or "overloaded" in str(e).lower():
                raise Fault("http_529", _retry_after(getattr(e, "response", None)), str(e)) from None
            if status >= 500:
                raise Fault("http_5xx", None, str(e)) from None
            raise LLMError(f"Anthropic refused the request ({status}): {e}") from None
        except (a.APIConnectionError, a.APITimeoutError) as e:
            raise Fault("http_5xx", None, f"connection: {e}") from None
        return Answer("".join(text), stop, u_in, u_write, u_read, u_out)


class BedrockProvider:
    """Converse API through boto3 (standard credential chain; ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``
    honoured by boto3 itself). Not streamed: the cache entry is visible once it answers."""

    def __init__(self, model: str):
        import boto3
        from botocore.config import Config

        spec = models.get(model)
        self.model = model if model != spec.id else (spec.bedrock_id or model)
        self.client = boto3.client("bedrock-runtime", config=Config(retries={"max_attempts": 1, "mode": "standard"},
                                                                    read_timeout=120))

    def call(self, prompt: Prompt, max_tokens: int, on_started: Callable[[dict[str, int]], None] | None) -> Answer:
        from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

        content: list[dict[str, Any]] = []
        if prompt.cached is not None:
            content.append({"text": prompt.cached})
            if prompt.cache:
                content.append({"cachePoint": {"type": "default"}})
        if prompt.preceding:
            content.append({"text": prompt.preceding})
        content.append({"text": prompt.instruction})
        try:
            r = self.client.converse(modelId=self.model, messages=[{"role": "user", "content": content}],
                                     inferenceConfig={"maxTokens": max_tokens, "temperature": 0.0})
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            headers = e.response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
            if code == "ThrottlingException" or status == 429:
                ra = headers.get("retry-after")
                raise Fault("http_429", float(ra) if ra else None, code) from None
            if code in ("ServiceUnavailableException", "ModelNotReadyException") or status in (503, 529):
                raise Fault("http_529", None, code) from None
            if status >= 500:
                raise Fault("http_5xx", None, code) from None
            raise LLMError(f"Bedrock refused the request ({code}): {e}") from None
        except (EndpointConnectionError, ReadTimeoutError) as e:
            raise Fault("http_5xx", None, f"connection: {e}") from None
        u = r.get("usage", {})
        if on_started:
            on_started({"cache_write_tokens": u.get("cacheWriteInputTokens", 0),
                        "cache_read_tokens": u.get("cacheReadInputTokens", 0)})
        text = "".join(block.get("text", "") for block in r["output"]["message"]["content"])
        return Answer(text, r.get("stopReason"), u.get("inputTokens", 0), u.get("cacheWriteInputTokens", 0),
                      u.get("cacheReadInputTokens", 0), u.get("outputTokens", 0))


def _retry_after(response) -> float | None:
    try:
        value = response.headers.get("retry-after") if response is not None else None
        return float(value) if value else None
    except (TypeError, ValueError):
        return None


class CallPool:
    """The per-process bound on calls in flight, served by priority, then in order.

    A document's first call goes ahead of other documents' fan-out calls: nothing else of its
    document can start before that call's response does, so a FIFO pool that queues it behind
    fan-outs (a busy worker holds many documents) starts documents late, and the last ones to
    start make the run's long tail while the other workers idle.
    """

    FIRST, REST = 0, 1

    def __init__(self, size: int):
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()  # ties: in order of submission (never compares futures)
        for i in range(size):
            threading.Thread(target=self._serve, name=f"llm-{i}", daemon=True).start()

    def submit(self, priority: int, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        self._queue.put((priority, next(self._order), future, fn, args))
        return future

    def _serve(self) -> None:
        while True:
            _, _, future, fn, args = self._queue.get()
            if not future.set_running_or_notify_cancel():  # cancelled while queued
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as e:  # handed to whoever waits on the future
                future.set_exception(e)


_pool_lock = threading.Lock()
_pool: CallPool | None = None


def worker_pool() -> CallPool:
    """One pool per process: its size is the per-worker bound on calls in flight."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = CallPool(get_settings().llm_concurrency)
        return _pool


def window(chunks: list[Chunk], i: int, first: int, previous: int) -> tuple[list[Chunk], list[Chunk]]:
    """The long-document window for chunk ``i``: the first ``first`` chunks, then the
    ``previous`` chunks before ``i`` that are not already among them."""
    start = max(first, i - previous)
    return chunks[:first], chunks[start:i]


class LLMContextualizer:
    def __init__(self, config: CollectionConfig, provider: Provider, scope: str):
        s = get_settings()
        self.config = config
        self.provider = provider
        self.spec = models.get(config.model)
        limits = s.rate_limits.get(config.model)
        self.limiter = RateLimiter(f"{scope}:{config.model}",
                                   models.Limits(**limits) if limits else self.spec.limits, s.rate_limit_burst_s)
        self.name = config.contextualizer
        # What the provider counts per estimated token, for the document block (its share of a
        # warm-up call, learned from cache writes) and for the rest of a prompt (instruction +
        # chunk, learned from uncached input beside a cache hit or write): two kinds of text
        # with different ratios, and the document block is the big, costly one to get wrong.
        self.document_tokens = TokenCalibration()
        self.prompt_tokens = TokenCalibration()

    def _calibrate(self, cached_est: int, rest_est: int, answer: "Answer") -> None:
        if answer.cache_write_tokens:
            self.document_tokens.observe(cached_est, answer.cache_write_tokens)
        if answer.cache_write_tokens or answer.cache_read_tokens:
            self.prompt_tokens.observe(rest_est, answer.input_tokens)
        elif cached_est:  # no cache: the document is inside input_tokens with the rest
            self.document_tokens.observe(cached_est, answer.input_tokens - round(self.prompt_tokens.mean * rest_est))

    # -- one chunk ---------------------------------------------------------------------------
    def _prompt(self, doc: SourceDocument, chunk: Chunk, long_doc: bool) -> Prompt:
        s = get_settings()
        instruction = prompts.chunk_instruction(chunk.text, self.config.prompt)
        if not long_doc:
            cached = prompts.document_block(doc.text)
            preceding = None
        else:
            position = next(i for i, c in enumerate(doc.chunks) if c.n == chunk.n)
            head, before = window(doc.chunks, position, s.long_doc_first_chunks, s.long_doc_previous_chunks)
            cached = prompts.document_block("".join(c.text for c in head), partial=True)
            preceding = prompts.PRECEDING_BLOCK.format(preceding="".join(c.text for c in before)) if before else None
        # A breakpoint costs nothing below the model's minimum (the API then caches nothing and
        # charges plain input), so near the threshold we set it rather than trust an estimate;
        # a single-chunk document never reads its write back, so it gets none.
        cache = len(doc.chunks) > 1 and models.estimate_tokens(cached) >= 0.8 * self.spec.min_cacheable_tokens
        return Prompt(cached, cache, preceding, instruction)

    def _situate(self, doc: SourceDocument, run: str | None, chunk: Chunk, prompt: Prompt, expect_read: bool,
                 on_started: Callable[[dict[str, int]], None] | None) -> Context:
        s = get_settings()
        cached_tokens = models.estimate_tokens(prompt.cached or "")
        rest_tokens = models.estimate_tokens(prompt.instruction + (prompt.preceding or ""))
        # Reserve what the provider will count: cache reads don't count toward input limits.
        reading = prompt.cache and expect_read
        reserve_in = self.prompt_tokens.reserve(rest_tokens) + (0 if reading else self.document_tokens.reserve(cached_tokens))
        overloaded = 0  # 529/5xx answers so far: the exponent of the backoff
        attempt = 0
        # A 429 is "not now", not a failure: it spends patience, not attempts; only 529/5xx
        # (and connection errors) count toward llm_max_attempts.
        patience_until = time.monotonic() + s.llm_rate_limit_patience_s
        while True:
            attempt += 1
            reservation = self.limiter.acquire(reserve_in, s.llm_max_output_tokens)
            t0 = time.monotonic()
            try:
                answer = self.provider.call(prompt, s.llm_max_output_tokens, on_started)
            except Fault as fault:
                self.limiter.settle(reservation, 0, 0)
                usage.record_fault(doc.collection, run, fault.kind)
                if fault.kind != "http_429" and overloaded + 1 >= s.llm_max_attempts:
                    raise LLMError(f"chunk {chunk.n}: gave up after {attempt} attempts ({fault})") from None
                if fault.kind == "http_429" and time.monotonic() > patience_until:
                    raise LLMError(f"chunk {chunk.n}: still rate limited after "
                                   f"{s.llm_rate_limit_patience_s:.0f}s ({fault})") from None
                if fault.kind == "http_429":
                    delay = fault.retry_after if fault.retry_after is not None else 2.0
                    self.limiter.penalize(delay)
                    time.sleep(delay * (1 + random.random() * 0.1))
                else:
                    overloaded += 1
                    time.sleep(min(30.0, 0.5 * 2 ** (overloaded - 1)) * (0.5 + random.random()))
                continue
            latency = time.monotonic() - t0
            charged = answer.input_tokens + answer.cache_write_tokens
            self.limiter.settle(reservation, charged, answer.output_tokens)
            self._calibrate(cached_tokens, rest_tokens, answer)
            cost = models.cost_usd(self.spec, answer.input_tokens, answer.cache_write_tokens,
                                   answer.cache_read_tokens, answer.output_tokens)
            u = {"model": self.config.model, "input_tokens": answer.input_tokens,
                 "cache_write_tokens": answer.cache_write_tokens, "cache_read_tokens": answer.cache_read_tokens,
                 "output_tokens": answer.output_tokens, "cost_usd": cost, "attempt": attempt,
                 "latency_ms": round(latency * 1000)}
            usage.record_call(doc.collection, run, doc.doc_id, chunk.n, self.config.model, u, latency, cost, attempt)
            text = " ".join(answer.text.split())
            if answer.stop_reason == "refusal":
                raise LLMError(f"chunk {chunk.n}: the model refused to answer")
            if not text:
                raise LLMError(f"chunk {chunk.n}: the model returned an empty context")
            return Context(text[: s.llm_max_context_chars], u)

    # -- one document ------------------------------------------------------------------------
    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        s = get_settings()
        run = doc.run
        long_doc = models.estimate_tokens(doc.text) > s.llm_max_document_tokens
        plans = [(c, self._prompt(doc, c, long_doc)) for c in chunks]
        if not plans:
            return
        cacheable = plans[0][1].cache
        pool = worker_pool()
        started = threading.Event()
        warm: dict[str, int] = {}  # the warm-up call's cache counters, known when it starts

        def on_started(counters: dict[str, int]) -> None:
            warm.update(counters)
            started.set()

        calls: list[dict[str, Any]] = []
        pending: dict[Future, Chunk] = {}
        waiting = list(plans)

        def submit(chunk: Chunk, prompt: Prompt, expect_read: bool, warm_up: bool = False) -> None:
            first = not pending and not calls and not doc.warm  # this document's first call
            pending[pool.submit(CallPool.FIRST if first else CallPool.REST, self._situate, doc, run, chunk,
                                prompt, expect_read, on_started if warm_up else None)] = chunk

        try:
            if cacheable and len(waiting) > 1 and not doc.warm:
                # Warm first: one call, and wait until its response starts (or it ends).
                chunk, prompt = waiting.pop(0)
                submit(chunk, prompt, expect_read=False, warm_up=True)
                warm_up = next(iter(pending))
                while not started.wait(0.05) and not warm_up.done():
                    pass
                if warm_up.done() and warm_up.exception():
                    raise warm_up.exception()
            else:
                started.set()
            # Reserve rate-limit budget for reads only where a read is due: the document is
            # known warm, or our warm-up really cached the prefix (near the model's minimum our
            # token estimate can be on either side of it). A lone call on a cold document (a
            # big document's first call, before its slices fan out) writes: reserving it as a
            # read overdrew the shared bucket by the whole document, and 429s followed.
            reads = cacheable and (doc.warm or warm.get("cache_write_tokens", 0) + warm.get("cache_read_tokens", 0) > 0)
            bound = s.llm_document_concurrency
            error: BaseException | None = None
            while pending or (waiting and error is None):
                while waiting and error is None and len(pending) < bound:
                    chunk, prompt = waiting.pop(0)
                    submit(chunk, prompt, expect_read=reads)
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for future in done:
                    chunk = pending.pop(future)
                    if future.exception() is not None:
                        # Stop sending, but let the calls in flight finish and hand them over
                        # for checkpointing: they are paid for.
                        error = error or future.exception()
                        continue
                    calls.append(future.result().usage)
                    yield chunk, future.result()
            if error is not None:
                raise error  # the document fails; a retry pays only for what is missing
        finally:
            for future in pending:
                future.cancel()
        # The cacheable prefix as the provider counted it: 0 when it cached nothing (too short).
        prefix = max((max(c["cache_write_tokens"], c["cache_read_tokens"]) for c in calls), default=0)
        usage.record_document(doc.collection, run, doc.doc_id, self.config.model, calls,
                              models.estimate_tokens(doc.text), prefix, already_cached=doc.warm)


def anthropic_contextualizer(config: CollectionConfig) -> LLMContextualizer:
    return LLMContextualizer(config, AnthropicProvider(config.model), "anthropic")


def bedrock_contextualizer(config: CollectionConfig) -> LLMContextualizer:
    return LLMContextualizer(config, BedrockProvider(config.model), "bedrock")
