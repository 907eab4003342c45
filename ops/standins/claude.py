"""A local stand-in for the paid APIs: Anthropic Messages (streaming; Message Batches in
``standins.batches``), Bedrock Converse, and the embedding and rerank APIs of Voyage, Bedrock
and Cohere (``standins.vectors``), driven by tests and benchmarks through the real SDKs
(``ANTHROPIC_BASE_URL``, ``AWS_ENDPOINT_URL_BEDROCK_RUNTIME``). Our cost and cache figures come from it, so it follows
the caching rules that matter (as the providers document them):

- the cache key is the exact prefix up to the breakpoint (``cache_control`` / ``cachePoint``);
- an entry becomes visible only when the response that writes it *starts* (after its time to
  first byte): calls sent together before that each pay a full write;
- entries live ``ttl_s`` (300 s), refreshed on every hit;
- prefixes under the model's minimum are never cached: both counters 0. The minimum is the
  provider's (``API_CACHE_MINIMUM``, from the sources), not our table's: a wrong table entry then
  shows as calls that cache nothing, as it would against the real API;
- with several breakpoints, the longest prefix already cached (at a breakpoint) is read and
  only the rest, up to the last breakpoint, written;
- usage fields as the real APIs name them; cache reads don't count toward input-token limits;
- token buckets per model for requests / input / output tokens per minute: 429 with
  ``retry-after``; injected 529 ``overloaded_error`` with probability ``p_529``;
- a latency model in which uncached input tokens cost time and cache reads almost none;
- deterministic answers built from the document's first line and the chunk;
- connections cut as a network cuts them, on a share of requests (``faultproxy``: closed without
  an answer, reset after the work is done, or stalled past the client's read timeout), in front
  of every route but its own ``/standin/*``.

Tokens are counted with its own rule (words and punctuation marks), not the client's estimate.
Run: ``python -m ops.standins.claude --port 8100`` (from the repository); ``GET /standin/stats``, ``POST /standin/config``,
``POST /standin/reset``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import random
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ops.fleet import faultproxy
from ops.standins import batches as standin_batches
from ops.standins import cache as standin_cache
from ops.standins import vectors as standin_vectors
from workers import models

_TOKEN = standin_cache.TOKEN
count_tokens = standin_cache.count_tokens


@dataclass
class Config:
    base_latency_s: float = 0.2             # time to first byte, fixed part
    uncached_s_per_ktok: float = 0.08       # + per 1,000 uncached input or written tokens
    read_s_per_ktok: float = 0.005          # + per 1,000 tokens read from cache
    output_s_per_tok: float = 0.004         # generation time per output token
    ttl_s: float = 300.0
    p_529: float = 0.0
    seed: int = 7
    limits: dict[str, dict[str, int]] = field(default_factory=dict)  # model -> {rpm, itpm, otpm}
    burst_s: float = 60.0
    batch_delay_s: float = 0.5
    # The Batches API's limits (standins.batches): a minute's requests (0: none), its queue, a batch's size.
    batch_rpm: int = 0
    batch_burst_s: float = 60.0  # the budget's capacity, in seconds of it (the API: a minute's)
    batch_queue_limit: int = 100_000
    batch_max_requests: int = 100_000
    batch_max_bytes: int = 256_000_000
    batch_expire_marker: str = ""  # a batch request whose chunk holds it expires
    # Fault injection for tests: a request whose last block (the chunk instruction) contains
    # ``fail_marker`` gets a 400, one containing ``empty_marker`` an empty answer.
    fail_marker: str = ""
    empty_marker: str = ""
    huge_marker: str = ""   # an answer as long as max_tokens allows, as a model that rambles
    # A share of answers ``slow_s`` later than usual: slower than a client's timeout, they are
    # paid for (the work is done) but the client has given up and asks again.
    p_slow: float = 0.0
    slow_s: float = 0.0
    # Connections cut, on a share of requests (faultproxy.Faults): dropped before, reset after the
    # answer began, stalled ``stall_s``.
    p_drop: float = 0.0
    p_reset: float = 0.0
    p_stall: float = 0.0
    stall_s: float = 10.0


class Bucket:
    def __init__(self, per_minute: int, burst_s: float):
        self.rate = per_minute / 60.0
        self.cap = max(1.0, per_minute * burst_s / 60.0)
        self.level, self.ts = self.cap, time.monotonic()

    def refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.cap, self.level + (now - self.ts) * self.rate)
        self.ts = now

    def wait_for(self, need: float) -> float:
        self.refill()
        need = min(need, self.cap)
        return 0.0 if self.level >= need else (need - self.level) / self.rate


class StandIn:
    def __init__(self, config: Config):
        self.config = config
        self.reset()

    def batch_bucket(self, rpm: int) -> Bucket:
        """The Batches API's per-minute budget, all its endpoints together (``batch_burst_s`` of it at once)."""
        if self._batch_bucket is None or round(self._batch_bucket.rate * 60) != rpm:
            self._batch_bucket = Bucket(rpm, self.config.batch_burst_s)
        return self._batch_bucket

    def reset(self) -> None:
        self.cache: dict[str, dict[str, float]] = {}
        self.buckets: dict[str, list[Bucket]] = {}
        self.random = random.Random(self.config.seed)
        self.stats: dict[str, Any] = {"requests": 0, "ok": 0, "http_429": 0, "http_529": 0, "input_tokens": 0,
                                      "cache_write_tokens": 0, "cache_read_tokens": 0, "output_tokens": 0,
                                      "in_flight": 0, "max_in_flight": 0, "first_at": None, "last_at": None,
                                      "batch_requests": 0, "breakpoints": 0, "http_429_by": {}, "busy_s": 0.0,
                                      "batch_creations": 0, "batch_api_requests": 0, "batch_api_429": 0,
                                      "batch_queue_429": 0, "batch_refused_size": 0, "http_400_refused": 0,
                                      "first_blocks": {}, "blocks_per_request": {}}
        self.flight_changed_at: float | None = None  # last time the calls in flight changed
        self.admitted: list[float] = []  # wall-clock time of each request let through
        self.admitted_tokens: list[int] = []  # and the input tokens it was charged
        self.batches: dict[str, dict[str, Any]] = {}
        self._batch_bucket: Bucket | None = None
        self.expired: set[str] = set()  # batch requests expired once (``batch_expire_marker``)
        self.paid: dict[str, int] = {}  # answers billed, per prompt: a prompt billed twice was paid twice
        self.first_paid_at: dict[str, float] = {}  # when each prompt's first answer was billed (wall clock)
        self.spans: list[list[float]] = []  # [start, end] wall-clock of each call (end 0 while in flight)

    # -- caching (standins.cache) -----------------------------------------------------------------
    def plan(self, model: str, blocks: list[tuple[str, bool]], ttl_s: float) -> dict[str, int]:
        self.stats["breakpoints"] += any(bp for _, bp in blocks)
        if blocks:  # what each prompt begins with (a collection's glossary, a document), and in how many blocks
            first = hashlib.sha256(blocks[0][0].encode()).hexdigest()[:12]
            self.stats["first_blocks"][first] = self.stats["first_blocks"].get(first, 0) + 1
            n = str(len(blocks))
            self.stats["blocks_per_request"][n] = self.stats["blocks_per_request"].get(n, 0) + 1
        return standin_cache.plan(self.cache, models.get(model), blocks, ttl_s)

    def ttfb(self, usage: dict[str, int]) -> float:
        c = self.config
        uncached = usage["input_tokens"] + usage["cache_write_tokens"]
        return c.base_latency_s + uncached / 1000 * c.uncached_s_per_ktok + usage["cache_read_tokens"] / 1000 * c.read_s_per_ktok

    def commit_write(self, usage: dict[str, Any], visible_at: float, ttl_s: float) -> None:
        standin_cache.commit(self.cache, usage, visible_at, ttl_s)

    # -- limits --------------------------------------------------------------------------------
    def admit(self, model: str, usage: dict[str, int], max_tokens: int) -> float:
        """0 if admitted (and charged), else seconds to wait (the retry-after)."""
        spec = models.get(model)
        limits = self.config.limits.get(spec.id)
        if not limits:
            return 0.0
        if spec.id not in self.buckets:
            self.buckets[spec.id] = [Bucket(limits[k], self.config.burst_s) for k in ("rpm", "itpm", "otpm")]
        buckets = self.buckets[spec.id]
        needs = (1, usage["input_tokens"] + usage["cache_write_tokens"], max_tokens)
        waits = [b.wait_for(n) for b, n in zip(buckets, needs)]
        wait = max(waits)
        if wait > 0:
            short = ("rpm", "itpm", "otpm")[waits.index(wait)]
            self.stats["http_429_by"][short] = self.stats["http_429_by"].get(short, 0) + 1
            return wait
        for b, n in zip(buckets, needs):
            b.level -= min(n, b.cap)
        self.admitted.append(time.time())
        self.admitted_tokens.append(needs[1])
        return 0.0

    def refund_output(self, model: str, max_tokens: int, used: int) -> None:
        spec = models.get(model)
        if spec.id in self.buckets:
            self.buckets[spec.id][2].level += max(0, max_tokens - used)

    # -- answers -------------------------------------------------------------------------------
    @staticmethod
    def answer(full_text: str, max_tokens: int) -> str:
        passage = re.search(r"<passage>\n(.*?)\n</passage>", full_text, re.S)
        if passage:  # asked for a search question (question generation): one in other words, or,
            # for a passage holding "COPY-ME", one that copies it (what the generator must drop)
            words = [w for w in re.findall(r"[A-Za-z0-9]+", passage.group(1)) if len(w) > 3]
            if "COPY-ME" in passage.group(1):
                return "What does " + " ".join(passage.group(1).split()[:8]) + " say?"
            named = " ".join(words[:2] + words[-1:]) if words else "this"
            return f"Which part explains {named}?"
        doc = re.search(r"<document>\n(.*?)(\n</document>|$)", full_text, re.S)
        chunk = re.search(r"<chunk>\n(.*?)\n</chunk>", full_text, re.S)
        title = next((ln.strip(" /#*!") for ln in (doc.group(1) if doc else "").splitlines() if ln.strip(" /#*!")), "")
        words = (chunk.group(1) if chunk else full_text).split()[:14]
        text = f"This chunk is from the document that begins '{title[:80]}'; it covers {' '.join(words)}."
        tokens = _TOKEN.findall(text)
        if len(tokens) > max_tokens:
            text = " ".join(tokens[:max_tokens])
        return text

    def _in_flight(self, change: int) -> None:
        """Calls in flight, integrated over time in ``busy_s``: busy_s / elapsed = the mean."""
        now, s = time.time(), self.stats
        if self.flight_changed_at is not None:
            s["busy_s"] += s["in_flight"] * (now - self.flight_changed_at)
        s["in_flight"] += change
        self.flight_changed_at = now

    def slowness(self) -> float:
        return self.config.slow_s if self.config.p_slow and self.random.random() < self.config.p_slow else 0.0

    def begin(self) -> list[float]:
        """Returns the call's span, to close in ``end``."""
        s = self.stats
        s["requests"] += 1
        span = [time.time(), 0.0]
        self.spans.append(span)
        self._in_flight(+1)
        s["max_in_flight"] = max(s["max_in_flight"], s["in_flight"])
        s["first_at"] = s["first_at"] or time.time()
        return span

    def end(self, usage: dict[str, int] | None, prompt: str = "", span: list[float] | None = None) -> None:
        s = self.stats
        if span is not None:
            span[1] = time.time() if usage else -1.0  # -1: answered with an error, not billed
        self._in_flight(-1)
        s["last_at"] = time.time()
        if usage:
            key = hashlib.sha1(prompt.encode()).hexdigest()
            self.paid[key] = self.paid.get(key, 0) + 1
            self.first_paid_at.setdefault(key, time.time())
            s["ok"] += 1
            for k in ("input_tokens", "cache_write_tokens", "cache_read_tokens", "output_tokens"):
                s[k] += usage.get(k, 0)


def anthropic_blocks(body: dict[str, Any]) -> tuple[list[tuple[str, bool]], float]:
    blocks: list[tuple[str, bool]] = []
    ttl = 300.0
    system = body.get("system")
    if isinstance(system, str):
        blocks.append((system, False))
    elif isinstance(system, list):
        for b in system:
            blocks.append((b.get("text", ""), "cache_control" in b))
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            blocks.append((content, False))
            continue
        for b in content:
            cc = b.get("cache_control")
            if cc and cc.get("ttl") == "1h":
                ttl = 3600.0
            blocks.append((b.get("text", ""), bool(cc)))
    return blocks, ttl


def anthropic_error(status: int, kind: str, message: str, retry_after: float | None = None) -> JSONResponse:
    headers = {"retry-after": str(max(1, math.ceil(retry_after)))} if retry_after is not None else {}
    return JSONResponse({"type": "error", "error": {"type": kind, "message": message}}, status_code=status,
                        headers=headers)


def make_app(standin: StandIn, proxy: faultproxy.FaultProxy | None = None) -> FastAPI:
    app = FastAPI(title="situate stand-in for Anthropic, Bedrock, Voyage and Cohere")
    vectors = standin_vectors.VectorStats()
    standin_vectors.register(app, vectors)

    def usage_json(u: dict[str, int], ttl: float) -> dict[str, Any]:
        write = u["cache_write_tokens"]
        return {"input_tokens": u["input_tokens"], "cache_creation_input_tokens": write,
                "cache_read_input_tokens": u["cache_read_tokens"], "output_tokens": u.get("output_tokens", 0),
                "cache_creation": {"ephemeral_5m_input_tokens": write if ttl < 3600 else 0,
                                   "ephemeral_1h_input_tokens": write if ttl >= 3600 else 0}}

    async def prepare(model: str, blocks, ttl: float, max_tokens: int):
        """Shared by both protocols: 529 injection, cache plan, limits. Returns (usage, error)."""
        if standin.config.p_529 and standin.random.random() < standin.config.p_529:
            standin.stats["http_529"] += 1
            return None, ("http_529", None)
        u = standin.plan(model, blocks, ttl)
        wait = standin.admit(model, u, max_tokens)
        if wait > 0:
            standin.stats["http_429"] += 1
            u.pop("_keys", None)
            return None, ("http_429", wait)
        return u, None

    @app.post("/v1/messages")
    async def messages(request: Request):
        body = await request.json()
        model, max_tokens = body["model"], int(body.get("max_tokens", 256))
        try:
            models.get(model)
        except ValueError as e:
            return anthropic_error(404, "not_found_error", str(e))
        blocks, ttl = anthropic_blocks(body)
        full = "".join(t for t, _ in blocks)
        last = blocks[-1][0] if blocks else ""
        if standin.config.fail_marker and standin.config.fail_marker in last:
            standin.stats["http_400_refused"] += 1  # not a request billed: counted apart
            return anthropic_error(400, "invalid_request_error", "this prompt is refused (fail_marker)")
        span = standin.begin()
        u, err = await prepare(model, blocks, ttl, max_tokens)
        if err:
            standin.end(None, span=span)
            if err[0] == "http_529":
                return anthropic_error(529, "overloaded_error", "Overloaded")
            return anthropic_error(429, "rate_limit_error", "rate limit exceeded", err[1])
        first_byte = standin.ttfb(u) + standin.slowness()
        visible_at = time.monotonic() + first_byte
        standin.commit_write(u, visible_at, ttl)  # visible once this response starts
        text = standin.answer(full, max_tokens)
        if standin.config.empty_marker and standin.config.empty_marker in last:
            text = ""
        if standin.config.huge_marker and standin.config.huge_marker in last:
            text = " ".join(["rambling"] * max_tokens)  # as long as max_tokens lets a model go
        u["output_tokens"] = count_tokens(text)
        gen = u["output_tokens"] * standin.config.output_s_per_tok
        msg_id = "msg_" + uuid.uuid4().hex[:24]

        if not body.get("stream"):
            await asyncio.sleep(first_byte + gen)
            standin.refund_output(model, max_tokens, u["output_tokens"])
            standin.end(u, model + full, span)
            return {"id": msg_id, "type": "message", "role": "assistant", "model": model,
                    "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                    "stop_sequence": None, "usage": usage_json(u, ttl)}

        async def events():
            def sse(kind: str, data: dict[str, Any]) -> bytes:
                return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()
            try:
                await asyncio.sleep(first_byte)
                start_usage = usage_json({**u, "output_tokens": 1}, ttl)
                yield sse("message_start", {"message": {"id": msg_id, "type": "message", "role": "assistant",
                                                        "model": model, "content": [], "stop_reason": None,
                                                        "stop_sequence": None, "usage": start_usage}})
                yield sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
                pieces = re.findall(r"\S+\s*", text) or [""]
                step = max(1, len(pieces) // 4)
                for i in range(0, len(pieces), step):
                    await asyncio.sleep(gen * step / len(pieces))
                    yield sse("content_block_delta", {"index": 0, "delta": {"type": "text_delta",
                                                                            "text": "".join(pieces[i:i + step])}})
                yield sse("content_block_stop", {"index": 0})
                yield sse("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                            "usage": {"output_tokens": u["output_tokens"]}})
                yield sse("message_stop", {})
            finally:
                standin.refund_output(model, max_tokens, u["output_tokens"])
                standin.end(u, model + full, span)

        return StreamingResponse(events(), media_type="text/event-stream")

    standin_batches.register(app, standin, blocks_of=anthropic_blocks, usage_json=usage_json, error=anthropic_error,
                             count_tokens=count_tokens)

    # -- Bedrock Converse ------------------------------------------------------------------------
    @app.post("/model/{model_id:path}/converse")
    async def converse(model_id: str, request: Request):
        body = await request.json()
        try:
            models.get(model_id)
        except ValueError as e:
            return JSONResponse({"message": str(e)}, status_code=400,
                                headers={"x-amzn-ErrorType": "ValidationException:"})
        blocks: list[tuple[str, bool]] = []
        for message in body.get("messages", []):
            for b in message.get("content", []):
                if "cachePoint" in b and blocks:
                    blocks[-1] = (blocks[-1][0], True)
                elif "text" in b:
                    blocks.append((b["text"], False))
        max_tokens = int(body.get("inferenceConfig", {}).get("maxTokens", 256))
        span = standin.begin()
        u, err = await prepare(model_id, blocks, 300.0, max_tokens)
        if err:
            standin.end(None, span=span)
            if err[0] == "http_529":
                return JSONResponse({"message": "Service unavailable"}, status_code=503,
                                    headers={"x-amzn-ErrorType": "ServiceUnavailableException:"})
            return JSONResponse({"message": "Too many requests, please wait before trying again."}, status_code=429,
                                headers={"x-amzn-ErrorType": "ThrottlingException:",
                                         "retry-after": str(max(1, math.ceil(err[1])))})
        first_byte = standin.ttfb(u) + standin.slowness()
        standin.commit_write(u, time.monotonic() + first_byte, 300.0)
        full = "".join(t for t, _ in blocks)
        text = standin.answer(full, max_tokens)
        u["output_tokens"] = count_tokens(text)
        await asyncio.sleep(first_byte + u["output_tokens"] * standin.config.output_s_per_tok)
        standin.refund_output(model_id, max_tokens, u["output_tokens"])
        standin.end(u, model_id + full, span)
        return {"output": {"message": {"role": "assistant", "content": [{"text": text}]}}, "stopReason": "end_turn",
                "usage": {"inputTokens": u["input_tokens"], "outputTokens": u["output_tokens"],
                          "totalTokens": (u["input_tokens"] + u["output_tokens"] + u["cache_write_tokens"]
                                          + u["cache_read_tokens"]),
                          "cacheReadInputTokens": u["cache_read_tokens"], "cacheWriteInputTokens": u["cache_write_tokens"]},
                "metrics": {"latencyMs": int(first_byte * 1000)}}

    # -- control ---------------------------------------------------------------------------------
    @app.get("/standin/stats")
    async def stats(times: bool = False, overlapping: str = ""):
        extra = {"admitted_at": standin.admitted, "admitted_tokens": standin.admitted_tokens} if times else {}
        paid_twice = sum(n - 1 for n in standin.paid.values())
        if times:  # when the prompts billed twice were first billed: which fault made each one
            extra["paid_twice_first_at"] = sorted(standin.first_paid_at[k] for k, n in standin.paid.items() if n > 1)
        if overlapping:  # "start,end" (wall clock): calls in flight at some moment of that window
            start, end = (float(x) for x in overlapping.split(","))
            extra["overlapping"] = sum(1 for a, b in standin.spans if a < end and (b == 0 or b > start) and b != -1)
        return {**standin.stats, "paid_twice": paid_twice, "cache_entries": len(standin.cache),
                "config": asdict(standin.config), "vectors": vectors.as_json(),
                "cut": dict(proxy.stats) if proxy is not None else {}, **extra}

    def reset_all() -> None:
        standin.reset()
        vectors.reset()
        if proxy is not None:
            proxy.reset()

    @app.post("/standin/reset")
    async def reset():
        reset_all()
        return {"ok": True}

    @app.post("/standin/vector_faults")
    async def vector_faults(request: Request):
        """``{"count": N, "status": 429 | 503}``: the next N embedding/rerank requests fail so."""
        body = await request.json()
        vectors.faults_left, vectors.fault_status = int(body["count"]), int(body.get("status", 429))
        return {"ok": True}

    @app.post("/standin/config")
    async def configure(request: Request):
        changes = await request.json()
        for k, v in changes.items():
            if not hasattr(standin.config, k):
                return JSONResponse({"error": f"unknown setting {k}"}, status_code=400)
            setattr(standin.config, k, v)
        reset_all()
        return asdict(standin.config)

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--config", default="{}", help="JSON overrides of the Config fields")
    args = parser.parse_args()
    config = Config(**json.loads(args.config))
    standin = StandIn(config)

    def faults() -> faultproxy.Faults:
        c = standin.config
        return faultproxy.Faults(c.p_drop, c.p_reset, c.p_stall, c.stall_s, c.seed)

    faultproxy.serve_app(lambda proxy: make_app(standin, proxy), faults, args.port, exempt=("/standin/",))


if __name__ == "__main__":
    main()
