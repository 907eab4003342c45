"""The scheduling that makes prompt caching pay, for Claude behind either provider.

Per document, the first call alone; once its response has *started* (the moment its cache
entry becomes visible) the rest of the document's chunks in parallel, up to a per-document
and a per-worker bound (``callpool``). All of a document's calls are issued together, so they
sit well inside the cache TTL; documents too short for the model's cache minimum get no
breakpoint (a write would cost 1.25x for nothing) and fan out at once.

Long documents (over ``llm_max_document_tokens``): the document's opening and the window of
its own section the chunk is in, two cached blocks (``contextualizers.windows``). The first call
warms the opening and its window; then each other window's first call (reading the opening,
writing the window), and, once that one is answered, the rest of its chunks.

Faults are waited out as ``workers.faults`` decides for every call (a 429 also empties the
shared request bucket, so every worker backs off); any other 4xx, an empty or refused answer fail
the chunk — and so the document, visibly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

from workers import faults, models
from workers.chunks.splitting import Chunk
from workers.contextualizers import prompts, windows
from workers.contextualizers.base import Context, SourceDocument
from workers.contextualizers.llm import usage
from workers.contextualizers.llm.callpool import CallPool, worker_pool
from workers.contextualizers.llm.providers import Answer, AnthropicProvider, BedrockProvider, Prompt, Provider
from workers.contextualizers.llm.ratelimit import RateLimiter, TokenCalibration, Unlimited
from workers.errors import LLMError, ProviderFault, ProviderUnavailable
from workers.settings import get_settings
from workers.storage.catalog import CollectionConfig

# What a reservation may meet that the call's tries wait out (``faults``).
NOT_NOW: tuple[type[BaseException], ...] = (ProviderFault, *faults.STORE_FAULTS)

log = logging.getLogger("situate.llm")


class LLMContextualizer:
    def __init__(self, config: CollectionConfig, provider: Provider, scope: str, spec: models.ModelSpec | None = None):
        """``spec``: the model's, where it is not the table's (a model your own servers serve)."""
        s = get_settings()
        self.config = config
        self.provider = provider
        self.spec = spec or models.get(config.model)
        if spec is None:
            status, note = models.lifecycle_note(self.spec)
            if note:
                log.warning("collection %s: %s", config.name, note)
        limits = s.rate_limits.get(config.model)
        self.limiter: RateLimiter | Unlimited = (
            RateLimiter(f"{scope}:{config.model}", models.Limits(**limits) if limits else self.spec.limits,
                        s.rate_limit_burst_s) if limits or self.spec.limited else Unlimited())
        self.name = config.contextualizer
        # A document over this is read as its opening and windows: the deployment's budget, or
        # less when the model's window is small (a model your own servers serve), leaving room for
        # the longest chunk, its instruction and the answer.
        room = self.spec.context_window - s.llm_max_output_tokens - round(1.5 * config.chunk_tokens) - 300
        self.max_document_tokens = max(1024, min(s.llm_max_document_tokens, room))
        self.opening_tokens = min(s.llm_long_doc_opening_tokens, self.max_document_tokens // 4)
        self.window_tokens = min(s.llm_long_doc_window_tokens, self.max_document_tokens - self.opening_tokens)
        # One document's calls in flight at once: on servers of your own, within its replica's slots.
        self.document_concurrency = s.llm_document_concurrency
        if scope == "openai":
            self.document_concurrency = min(self.document_concurrency, s.openai_replica_concurrency)
        # What the provider counts per estimated token, for the document block (its share of a
        # warm-up call, learned from cache writes) and for the rest of a prompt (instruction +
        # chunk, learned from uncached input beside a cache hit or write): two kinds of text
        # with different ratios, and the document block is the big, costly one to get wrong.
        self.document_tokens = TokenCalibration()
        self.prompt_tokens = TokenCalibration()
        self._plans: dict[tuple[str, str, str], windows.Plan] = {}  # a long document's windows, once per document

    def _calibrate(self, cached_est: int, rest_est: int, answer: Answer) -> None:
        if answer.cache_write_tokens:
            self.document_tokens.observe(cached_est, answer.cache_write_tokens)
        if answer.cache_write_tokens or answer.cache_read_tokens:
            self.prompt_tokens.observe(rest_est, answer.input_tokens)
        elif cached_est:  # no cache: the document is inside input_tokens with the rest
            self.document_tokens.observe(cached_est, answer.input_tokens - round(self.prompt_tokens.mean * rest_est))

    # -- one chunk ---------------------------------------------------------------------------
    def plan(self, doc: SourceDocument) -> windows.Plan:
        """A long document's opening and windows (the same for every chunk and every slice)."""
        key = (doc.collection, doc.doc_id, doc.version)
        if key not in self._plans:
            self._plans = {key: windows.plan(doc.text, doc.chunks, lambda t: models.estimate_tokens(t, self.spec),
                                             self.opening_tokens, self.window_tokens)}
        return self._plans[key]

    def is_long(self, doc: SourceDocument) -> bool:
        """Too long to read whole: read as its opening and windows."""
        return models.estimate_tokens(doc.text, self.spec) > self.max_document_tokens

    def long_document_plan(self, doc: SourceDocument) -> windows.Plan | None:
        """The windows of a document too long to read whole, None for the others (slicing follows them)."""
        return self.plan(doc) if self.is_long(doc) else None

    def _prompt(self, doc: SourceDocument, chunk: Chunk, long_doc: bool) -> Prompt:
        instruction = prompts.chunk_instruction(chunk.text, self.config.prompt)
        glossary = prompts.glossary_block(self.config.glossary)
        if not long_doc:
            parts: tuple[str, ...] = (prompts.document_block(doc.text),)
        else:
            plan = self.plan(doc)
            window = plan.window_of(chunk.n)
            parts = (prompts.opening_block(plan.opening), prompts.window_block(window.title, window.text))
        # The glossary first, a block of its own: the same for every document of the collection.
        parts = ((glossary,) if glossary else ()) + parts
        cached = "".join(parts)
        if len(parts) == 1:
            parts = ()
        # A breakpoint costs nothing below the model's minimum (the API then caches nothing and
        # charges plain input), so near the threshold we set it rather than trust an estimate;
        # a single-chunk document never reads its write back, so it gets none.
        cache = len(doc.chunks) > 1 and models.estimate_tokens(cached, self.spec) >= 0.8 * self.spec.min_cacheable_tokens
        return Prompt(cached, cache, instruction, parts, key=f"{doc.collection}/{doc.doc_id}")

    def _call(self, doc: SourceDocument, run: str | None, chunk: Chunk, prompt: Prompt, expect_read: bool,
              on_started: Callable[[dict[str, int]], None] | None, ticket: Any = None) -> Context:
        """One call, tried as ``faults`` decides. ``ticket``: a slot on a replica reserved for its
        first try (``contextualize``); a retry waits for one of its own, and a ticket no try used
        is given back."""
        unused = [ticket] if ticket is not None else []
        try:
            return self._tries(doc, run, chunk, prompt, expect_read, on_started, unused)
        finally:
            for left in unused:
                self.provider.release(left)  # type: ignore[attr-defined]  # only a provider that reserves gives tickets

    def _tries(self, doc: SourceDocument, run: str | None, chunk: Chunk, prompt: Prompt, expect_read: bool,
               on_started: Callable[[dict[str, int]], None] | None, unused: list[Any]) -> Context:
        s = get_settings()
        cached_tokens = models.estimate_tokens(prompt.cached or "", self.spec)
        rest_tokens = models.estimate_tokens(prompt.instruction, self.spec)
        # Reserve what the provider will count: cache reads don't count toward input limits.
        reading = prompt.cache and expect_read
        reserve_in = self.prompt_tokens.reserve(rest_tokens) + (0 if reading else self.document_tokens.reserve(cached_tokens))
        # One call's tries, as ``faults`` decides for every call out of the process. Each try
        # reserves its share of the shared rate limit first; a 429 empties the request bucket
        # for its wait, so every worker backs off, not only the one that was told.
        tries = faults.retrying(on_fault=lambda fault: usage.record_fault(doc.collection, run, fault.kind, self.config.model),
                                on_wait=lambda fault, wait: self.limiter.penalize(wait) if fault.kind == "http_429" else None)
        try:
            for attempt in tries:
                # Outside the try: waiting on our own limiter is not the provider's fault.
                reservation = self.limiter.acquire(reserve_in, s.llm_max_output_tokens)
                with attempt:
                    t0 = time.monotonic()
                    first_token: list[float] = []

                    # a streamed call: its time to first token (bound now: the loop moves on after the call)
                    def started(counters: dict[str, int], t0: float = t0, first_token: list[float] = first_token) -> None:
                        first_token.append(time.monotonic() - t0)
                        if on_started is not None:
                            on_started(counters)

                    try:
                        if unused:  # the slot reserved for this call: used (and given back) by this try
                            answer = self.provider.call(prompt, s.llm_max_output_tokens, started if on_started else None,
                                                        ticket=unused.pop())  # type: ignore[call-arg]
                        else:
                            answer = self.provider.call(prompt, s.llm_max_output_tokens, started if on_started else None)
                    except BaseException:
                        self.limiter.settle(reservation, 0, 0)
                        raise
        except ProviderUnavailable as e:
            raise ProviderUnavailable(f"chunk {chunk.n}: {e}") from None
        attempt_number = tries.statistics.get("attempt_number", 1)
        latency = time.monotonic() - t0
        charged = answer.input_tokens + answer.cache_write_tokens
        self.limiter.settle(reservation, charged, answer.output_tokens)
        self._calibrate(cached_tokens, rest_tokens, answer)
        cost = models.cost_usd(self.spec, answer.input_tokens, answer.cache_write_tokens,
                               answer.cache_read_tokens, answer.output_tokens)
        u = {"model": self.config.model, "input_tokens": answer.input_tokens,
             "cache_write_tokens": answer.cache_write_tokens, "cache_read_tokens": answer.cache_read_tokens,
             "output_tokens": answer.output_tokens, "cost_usd": cost, "attempt": attempt_number,
             "latency_ms": round(latency * 1000)}
        if answer.replica:
            u["replica"] = answer.replica
            # The document block's share of the prompt, by characters: the prefix a cache shared
            # by every replica would have served, for the best possible when no call read it.
            prompt_chars = len(prompt.cached or "") + len(prompt.instruction)
            if prompt_chars:
                u["prefix_tokens"] = round((answer.input_tokens + answer.cache_read_tokens)
                                           * len(prompt.cached or "") / prompt_chars)
        if not answer.cache_reported:
            u["cache_reported"] = False
        usage.record_call(doc.collection, run, doc.doc_id, chunk.n, self.config.model, u, latency, cost, attempt_number,
                          first_token_s=first_token[0] if first_token else None,
                          text_chars=(len(prompt.cached or ""), len(prompt.instruction)))
        text = " ".join(answer.text.split())
        if answer.stop_reason == "refusal":
            raise LLMError(f"chunk {chunk.n}: the model refused to answer")
        if not text:
            raise LLMError(f"chunk {chunk.n}: the model returned an empty context")
        return Context(text[: s.llm_max_context_chars], u)

    # -- one document ------------------------------------------------------------------------
    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:  # noqa: C901 - one loop: the call order reads top down
        run = doc.run
        long_doc = self.is_long(doc)
        plans = [(c, self._prompt(doc, c, long_doc)) for c in chunks]
        if not plans:
            return
        # Calls that share a cached prefix: the whole document, or one window of a long one.
        groups: dict[str, list[tuple[Chunk, Prompt]]] = {}
        for chunk, prompt in plans:
            groups.setdefault(prompt.cached or "", []).append((chunk, prompt))
        group_of = {chunk.n: key for key, members in groups.items() for chunk, _ in members}
        cacheable = plans[0][1].cache
        pool = worker_pool()
        started = threading.Event()
        warm: dict[str, int] = {}  # the warm-up call's cache counters, known when it starts

        def on_started(counters: dict[str, int]) -> None:
            warm.update(counters)
            started.set()

        calls: list[dict[str, Any]] = []
        by_group: dict[str, list[dict[str, Any]]] = {}
        pending: dict[Future[Any], Chunk] = {}
        warming: dict[Future[Any], list[tuple[Chunk, Prompt]]] = {}  # a window's first call -> the rest of it

        # Replicas of your own servers: the call's slot is waited for here, in the document's
        # thread, before the call takes one of the process's call threads: a call waiting in a
        # full replica's line would hold a thread that another document's call, whose replica has
        # room, could use.
        reserve = getattr(self.provider, "reserve", None)
        tickets: dict[Future[Any], Any] = {}

        def submit(chunk: Chunk, prompt: Prompt, expect_read: bool, warm_up: bool = False) -> Future[Any]:
            first = not pending and not calls and not doc.warm  # this document's first call
            ticket = None
            if reserve is not None:
                try:
                    ticket = reserve(prompt)
                except NOT_NOW:  # every replica down, or Redis away: the call's own tries meet it, and wait it out
                    pass
            future = pool.submit(CallPool.FIRST if first else CallPool.REST, self._call, doc, run, chunk,
                                 prompt, expect_read, on_started if warm_up else None, ticket)
            pending[future] = chunk
            if ticket is not None:
                tickets[future] = ticket
            return future

        ready: list[tuple[Chunk, Prompt]] = []
        cold: list[list[tuple[Chunk, Prompt]]] = []  # windows whose block is not written yet
        try:
            first_key = plans[0][1].cached or ""
            if cacheable and len(plans) > 1 and not doc.warm:
                # Warm first: one call, and wait until its response starts (or it ends).
                members = groups[first_key]
                submit(*members[0], expect_read=False, warm_up=True)
                warm_up = next(iter(pending))
                while not started.wait(0.05) and not warm_up.done():
                    pass
                failure = warm_up.exception() if warm_up.done() else None
                if failure is not None:
                    raise failure
                ready = list(members[1:])
                cold = [g for key, g in groups.items() if key != first_key]
            else:
                started.set()
                if cacheable and plans[0][1].parts:  # a slice of a long document: its opening is
                    cold = list(groups.values())      # warm, its windows are written by their first call
                else:
                    ready = list(plans)
            # Reserve rate-limit budget for reads only where a read is due: the document is
            # known warm, or our warm-up really cached the prefix (near the model's minimum our
            # token estimate can be on either side of it). A lone call on a cold document (a
            # big document's first call, before its slices fan out) writes: reserving it as a
            # read overdrew the shared bucket by the whole document, and 429s followed.
            reads = cacheable and (doc.warm or warm.get("cache_write_tokens", 0) + warm.get("cache_read_tokens", 0) > 0)
            bound = self.document_concurrency
            error: BaseException | None = None
            while pending or ((ready or cold) and error is None):
                while error is None and len(pending) < bound and (ready or cold):
                    if cold:  # each window's first call first: every window written early, inside the TTL
                        members = cold.pop(0)
                        warming[submit(*members[0], expect_read=False)] = members[1:]
                    else:
                        submit(*ready.pop(0), expect_read=reads)
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for future in done:
                    chunk = pending.pop(future)
                    rest = warming.pop(future, [])
                    if future.exception() is not None:
                        # Stop sending, but let the calls in flight finish and hand them over
                        # for checkpointing: they are paid for.
                        error = error or future.exception()
                        continue
                    ready.extend(rest)  # its window is written: the rest of it reads
                    calls.append(future.result().usage)
                    by_group.setdefault(group_of[chunk.n], []).append(future.result().usage)
                    yield chunk, future.result()
            if error is not None:
                raise error  # the document fails; a retry pays only for what is missing
        except BaseException:
            # The calls made are in the bill with their cache reads: their best possible reads go
            # with them, or the share of the best could pass 100%. The document is counted once,
            # by the attempt that finishes it.
            if calls:
                usage.record_best_reads(doc.collection, run, self.config.model, self._best_read(by_group, doc.warm))
            raise
        finally:
            for future in pending:
                if future.cancel() and future in tickets:  # never ran: its reserved slot is given back here
                    self.provider.release(tickets[future])  # type: ignore[attr-defined]
        usage.record_document(doc.collection, run, doc.doc_id, self.config.model, calls,
                              models.estimate_tokens(doc.text, self.spec), best_read=self._best_read(by_group, doc.warm),
                              already_cached=doc.warm)

    @staticmethod
    def _best_read(by_group: dict[str, list[dict[str, Any]]], already_warm: bool) -> int:
        """The cache reads the same calls could have had at best: every call of a prefix reads it
        but the one that writes it (none, on a document already warm); the call that writes it can
        still read what comes before its part — the collection's glossary, a long document's
        opening — which is the cache read such a call did get."""
        best = 0
        for group in by_group.values():
            prefix = max((c["cache_read_tokens"] + c["cache_write_tokens"] for c in group), default=0)
            if not prefix:  # a server of your own that read nothing (or said nothing): the prefix by its share
                prefix = max((c.get("prefix_tokens", 0) for c in group), default=0)
            best += (len(group) if already_warm else max(0, len(group) - 1)) * prefix
            writer = max(group, key=lambda c: c["cache_write_tokens"])
            if writer["cache_write_tokens"] and not already_warm:
                best += writer["cache_read_tokens"]
        return best


def spec_for(config: CollectionConfig) -> models.ModelSpec:
    """The model a collection's LLM contextualizer calls, as the bill and the budgets see it."""
    return models.served(config.model) if config.contextualizer == "openai" else models.get(config.model)


def anthropic_contextualizer(config: CollectionConfig) -> LLMContextualizer:
    return LLMContextualizer(config, AnthropicProvider(config.model), "anthropic")


def bedrock_contextualizer(config: CollectionConfig) -> LLMContextualizer:
    return LLMContextualizer(config, BedrockProvider(config.model), "bedrock")


def openai_contextualizer(config: CollectionConfig) -> LLMContextualizer:
    from workers.contextualizers.llm.openai_compatible import OpenAICompatibleProvider

    return LLMContextualizer(config, OpenAICompatibleProvider(config.model), "openai", spec_for(config))
