"""Your own LLM servers, or a hosted API, behind the OpenAI Chat Completions protocol: vLLM,
SGLang, llama.cpp's server, Ollama, TGI, OpenAI itself — through the official ``openai`` SDK.

The same prompt as Claude's, as chat messages: the open-model system prompt, then one user
message that holds the document block first and the chunk's instruction last, so every call of a
document shares the longest prefix a server can cache. Each call is placed on its document's
replica (``replicas``). What the server read from its cache comes back in
``usage.prompt_tokens_details.cached_tokens`` (vLLM with ``--enable-prompt-tokens-details``,
SGLang with ``--enable-cache-report``, llama.cpp's server, OpenAI), or llama.cpp's
``timings.cache_n``; a server that says nothing has its read recorded as not reported, not 0.
Faults are told as for Claude (``workers.faults``); a replica that refuses a connection or times
out is also left alone for a while (``replicas``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from workers.contextualizers import prompts
from workers.contextualizers.llm import replicas
from workers.contextualizers.llm.providers import Answer, Prompt, outcome
from workers.errors import ProviderFault
from workers.settings import get_credentials, get_settings

# Self-hosted servers mostly want no key, but the SDK will not build a client without one.
NO_KEY = "situate-no-key"


def messages(prompt: Prompt) -> list[dict[str, str]]:
    """The system prompt, then the document (its blocks in order) and, last, the instruction."""
    document = "".join(prompt.parts or (prompt.cached or "",))
    return [{"role": "system", "content": prompt.system or prompts.SYSTEM},
            {"role": "user", "content": f"{document}\n\n{prompt.instruction}" if document else prompt.instruction}]


def takes_cache_key(url: str) -> bool:
    setting = get_settings().openai_prompt_cache_key
    if setting != "auto":
        return setting == "on"
    host = urlsplit(url).hostname or ""
    return host == "openai.com" or host.endswith(".openai.com")


class OpenAICompatibleProvider:
    """One model served by the replicas of ``SITUATE_OPENAI_BASE_URLS``."""

    def __init__(self, model: str):
        import openai

        self.model = model
        self.router = replicas.router()
        s = get_settings()
        key = get_credentials().openai_api_key or NO_KEY
        # Retries are ours (``workers.faults``), and a retry may go to another replica.
        self.clients = {r.label: openai.OpenAI(base_url=r.url, api_key=key, max_retries=0, timeout=s.llm_timeout_s)
                        for r in self.router.replicas}

    def reserve(self, prompt: Prompt) -> replicas.Ticket | None:
        """A slot for ``prompt``'s call on its document's replica, waited for by the caller (the
        scheduler, in the document's own thread) so that no call thread waits in a line. None
        where calls are routed one by one (round robin, least loaded): a document's calls go to
        several replicas there, and reserving them one after another in the document's thread
        would hold each back behind the one before; such a call waits in its own thread."""
        if get_settings().openai_routing != "affinity":
            return None
        return self.router.reserve(prompt.key)

    def release(self, ticket: replicas.Ticket) -> None:
        self.router.release(ticket)

    def call(self, prompt: Prompt, max_tokens: int, on_started: Callable[[dict[str, int]], None] | None,
             ticket: replicas.Ticket | None = None) -> Answer:
        """``ticket``: the slot reserved for this call (given back when it ends), else one is waited for here."""
        with self.router.slot(prompt.key, ticket) as replica:
            request: dict[str, Any] = {"model": self.model, "messages": messages(prompt), "max_tokens": max_tokens,
                                       "temperature": 0.0}
            if prompt.key and takes_cache_key(replica.url):
                request["prompt_cache_key"] = prompt.key
            try:
                if on_started is None:
                    return answer(self.clients[replica.label].chat.completions.create(**request), replica.label)
                return self._streamed(replica, request, on_started)
            except Exception as e:
                error = outcome(e, f"the server at {replica.label}")
                if isinstance(error, ProviderFault):
                    self.router.failed(replica, error)
                raise error from None

    def _streamed(self, replica: replicas.Replica, request: dict[str, Any],
                  on_started: Callable[[dict[str, int]], None]) -> Answer:
        """A document's first call, streamed: the fan-out begins once its first token is out (the
        server has then computed, and cached, the prefix)."""
        text: list[str] = []
        stop: str | None = None
        final: Any = None
        started = False
        stream = self.clients[replica.label].chat.completions.create(
            **request, stream=True, stream_options={"include_usage": True})
        for event in stream:
            if not started:
                started = True
                on_started({})
            for choice in event.choices or []:
                if choice.delta and choice.delta.content:
                    text.append(choice.delta.content)
                stop = choice.finish_reason or stop
            if event.usage is not None:
                final = event
        if final is None:  # a server that sends no usage in a stream: counted as nothing read, unreported
            return Answer("".join(text), stop, 0, 0, 0, 0, cache_reported=False, replica=replica.label)
        return _answer("".join(text), stop, final.usage, final, replica.label)


def answer(completion: Any, replica: str) -> Answer:
    choice = completion.choices[0] if completion.choices else None
    text = (choice.message.content or "") if choice else ""
    return _answer(text, choice.finish_reason if choice else None, completion.usage, completion, replica)


def _answer(text: str, finish: str | None, usage: Any, response: Any, replica: str) -> Answer:
    prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
    output_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
    cached = cached_tokens(usage, response)
    read = min(cached, prompt_tokens) if cached is not None else 0
    stop = "refusal" if finish == "content_filter" else finish
    return Answer(text, stop, prompt_tokens - read, 0, read, output_tokens, cache_reported=cached is not None,
                  replica=replica)


def cached_tokens(usage: Any, response: Any) -> int | None:
    """What the server says it read from its cache, or None where it says nothing."""
    details = getattr(usage, "prompt_tokens_details", None)
    value = getattr(details, "cached_tokens", None) if details is not None else None
    if value is None:  # llama.cpp's own report, beside the OpenAI fields
        timings = (getattr(response, "model_extra", None) or {}).get("timings")
        value = timings.get("cache_n") if isinstance(timings, dict) else None
    return int(value) if value is not None else None

