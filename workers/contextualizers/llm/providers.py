"""Claude behind two wire protocols: the Anthropic Messages API and Bedrock Converse (and, in
``openai_compatible``, your own servers behind the OpenAI Chat Completions protocol).

One attempt per ``call``; retries, rate limits and the bill are the scheduler's. Each provider
puts the document block first with a cache breakpoint after it (``cache_control`` /
``cachePoint``), then the chunk-specific blocks, and maps the provider's answers onto three
outcomes: an ``Answer`` with the four usage counters, a retryable ``ProviderFault`` (429 with its
``retry-after``, 529/overloaded, 5xx, 408, a dropped connection, a timeout: ``workers.faults``
tells them, as for every call out of the process), or a permanent ``LLMError`` (any other 4xx).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from workers import faults, models
from workers.errors import LLMError
from workers.settings import get_credentials, get_settings


@dataclass
class Prompt:
    cached: str | None     # the document block; identical for every chunk of the document
    cache: bool            # put a breakpoint after it (False below the model's minimum)
    instruction: str
    # A long document's cached text in parts, a breakpoint after each: its opening, then the
    # window the chunk is in (``contextualizers.windows``). Empty: ``cached`` is one block.
    parts: tuple[str, ...] = ()
    # The document's key (collection and id): where its calls are routed on servers of your own,
    # and OpenAI's ``prompt_cache_key``.
    key: str = ""
    system: str | None = None  # a system prompt of the caller's (question generation); None: the provider's own

    def blocks(self) -> list[tuple[str, bool]]:
        """The cached text as (text, breakpoint after it)."""
        if self.cached is None:
            return []
        return [(part, self.cache) for part in (self.parts or (self.cached,))]


@dataclass
class Answer:
    text: str
    stop_reason: str | None
    input_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    output_tokens: int
    # False where the server said nothing of its cache (Ollama; vLLM without
    # --enable-prompt-tokens-details): the read is unknown, not 0.
    cache_reported: bool = True
    replica: str = ""  # the replica that answered (servers of your own)


class Provider(Protocol):
    model: str

    def call(self, prompt: Prompt, max_tokens: int, on_started: Callable[[dict[str, int]], None] | None) -> Answer:
        """One attempt. With ``on_started`` (a warm-up call), calls it with the cache counters
        as soon as the response starts. Raises ProviderFault for retryable answers, LLMError for
        permanent ones."""
        ...


class AnthropicProvider:
    """Messages API. A warm-up call is streamed, so the fan-out can begin at ``message_start``;
    the others are plain requests (less work per call)."""

    def __init__(self, model: str):
        import anthropic

        if not (get_credentials().anthropic_api_key or get_credentials().anthropic_auth_token):
            raise LLMError("ANTHROPIC_API_KEY is not set on this worker")
        # Retries are ours: counted, shared with the limiter, and bounded in time.
        self.client = anthropic.Anthropic(max_retries=0, timeout=get_settings().llm_timeout_s)
        self.model = model
        self.extras = models.get(model).request_extras

    @staticmethod
    def content(prompt: Prompt, ttl: str = "5m") -> list[dict[str, Any]]:
        """Document block first (with the breakpoint), then the chunk-specific blocks."""
        content: list[dict[str, Any]] = []
        for text, breakpoint in prompt.blocks():
            block: dict[str, Any] = {"type": "text", "text": text}
            if breakpoint:
                block["cache_control"] = {"type": "ephemeral"} if ttl == "5m" else {"type": "ephemeral", "ttl": ttl}
            content.append(block)
        content.append({"type": "text", "text": prompt.instruction})
        return content

    def call(self, prompt: Prompt, max_tokens: int, on_started: Callable[[dict[str, int]], None] | None) -> Answer:
        # Our blocks are plain dicts; the SDK's TypedDicts would only restate them.
        messages: Any = [{"role": "user", "content": self.content(prompt)}]
        text: list[str] = []
        stop: str | None = None
        u_in = u_write = u_read = u_out = 0
        try:
            system: Any = {"system": prompt.system} if prompt.system else {}
            if on_started is None:  # only a warm-up call needs to know when its response starts
                m = self.client.messages.create(model=self.model, max_tokens=max_tokens, messages=messages,
                                                **system, **self.extras)
                u = m.usage
                return Answer("".join(b.text for b in m.content if b.type == "text"), m.stop_reason,
                              u.input_tokens or 0, u.cache_creation_input_tokens or 0,
                              u.cache_read_input_tokens or 0, u.output_tokens or 0)
            stream = self.client.messages.create(model=self.model, max_tokens=max_tokens, messages=messages,
                                                 stream=True, **system, **self.extras)
            event: Any  # a union of seven event types, told apart by ``type``
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
        except Exception as e:
            # The SDK wraps errors of the request only: once a stream's headers are in, a read
            # timeout or a dropped connection while iterating reaches us as httpx2's own.
            raise outcome(e, "Anthropic") from None
        return Answer("".join(text), stop, u_in, u_write, u_read, u_out)


class BedrockProvider:
    """Converse API through boto3 (standard credential chain; ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``
    honoured by boto3 itself). Not streamed: the cache entry is visible once it answers."""

    def __init__(self, model: str):
        import boto3
        from botocore.config import Config

        spec = models.get(model)
        self.model = model if model != spec.id else (spec.bedrock_id or model)
        self.extras = spec.request_extras  # Claude's own fields ride in additionalModelRequestFields
        self.client = boto3.client("bedrock-runtime", config=Config(retries={"max_attempts": 1, "mode": "standard"},
                                                                    read_timeout=get_settings().llm_timeout_s))

    def call(self, prompt: Prompt, max_tokens: int, on_started: Callable[[dict[str, int]], None] | None) -> Answer:
        content: list[dict[str, Any]] = []
        for text, breakpoint in prompt.blocks():
            content.append({"text": text})
            if breakpoint:
                content.append({"cachePoint": {"type": "default"}})
        content.append({"text": prompt.instruction})
        try:
            extra: dict[str, Any] = {"additionalModelRequestFields": self.extras} if self.extras else {}
            if prompt.system:
                extra["system"] = [{"text": prompt.system}]
            r = self.client.converse(modelId=self.model, messages=[{"role": "user", "content": content}],
                                     inferenceConfig={"maxTokens": max_tokens, "temperature": 0.0}, **extra)
        except Exception as e:
            raise outcome(e, "Bedrock") from None
        u = r.get("usage", {})
        if on_started:
            on_started({"cache_write_tokens": u.get("cacheWriteInputTokens", 0),
                        "cache_read_tokens": u.get("cacheReadInputTokens", 0)})
        text = "".join(block.get("text", "") for block in r["output"]["message"]["content"])
        return Answer(text, r.get("stopReason"), u.get("inputTokens", 0), u.get("cacheWriteInputTokens", 0),
                      u.get("cacheReadInputTokens", 0), u.get("outputTokens", 0))


def outcome(error: Exception, provider: str) -> Exception:
    """What a provider's error means: a transient fault (retried by the scheduler), a refusal
    (the chunk fails with the provider's words), or our own error, raised as it is."""
    fault = faults.classify(error)
    if fault is not None:
        return fault
    refused = faults.refusal(error)
    if refused is not None:
        return LLMError(f"{provider}: {refused}")
    return error
