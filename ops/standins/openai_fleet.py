"""A stand-in for one replica of an OpenAI-compatible server (vLLM-like), driven by the real
``openai`` SDK: ``POST /v1/chat/completions`` (plain and streamed), ``GET /v1/models``. Run one
process per replica (``harness.OpenAIFleet`` starts and kills them): what a fleet of replicas
costs is what the ``openai`` contextualizer's routing is for, so it follows what makes a replica's
cost:

- its own prefix cache, as vLLM's automatic prefix caching keeps it: the prompt (its chat
  template applied) in blocks of ``block_tokens`` (16) hashed in a chain, a block found only if
  every block before it was; least recently used blocks evicted past ``capacity_blocks``;
- prefill takes ``prefill_s_per_ktok`` per 1,000 *uncached* tokens, one prefill at a time per
  replica (prefill is compute-bound: running several at once is no faster), and a request's
  blocks enter the cache when its prefill ends;
- ``slots`` requests run at once (decode, ``decode_s_per_tok`` per output token, overlaps);
  the rest wait in the server's queue;
- usage as vLLM reports it with ``--enable-prompt-tokens-details``:
  ``prompt_tokens_details.cached_tokens`` (``report_cache`` off: no details at all, as Ollama);
- faults on demand (``POST /standin/config``): ``stall`` (requests hang past the client's
  timeout), and ``POST /standin/restart`` (its cache emptied, requests in flight dropped); a
  replica that refuses connections is one whose process was killed.

Each request is logged as it goes (``--log``, JSON lines by request id: its arrival with its
document and chunk as the prompt holds them, then its prefill's start, end and blocks' hashes,
then its answer with its cached tokens; ``read_log`` joins them) so a benchmark can replay the
same requests through one cache shared by every replica
(``shared_cache_reads``) and count what was computed twice.

Tokens are counted with the stand-ins' rule (words and punctuation marks, ``cache.TOKEN``).
Run: ``python -m ops.standins.openai_fleet --port 8201 --name r0``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from ops.standins.cache import TOKEN


@dataclass
class Config:
    slots: int = 4
    block_tokens: int = 16
    capacity_blocks: int = 20_000
    prefill_s_per_ktok: float = 0.1
    decode_s_per_tok: float = 0.002
    base_latency_s: float = 0.005
    report_cache: bool = True
    stall: bool = False


def template(messages: list[dict[str, Any]]) -> str:
    """A chat template: what the server tokenizes (the system prompt first, as real ones do)."""
    parts = [f"<|{m.get('role', 'user')}|>\n{content_text(m.get('content'))}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


def content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content or "")


def block_hashes(tokens: list[str], size: int) -> list[str]:
    """Full blocks only, each hash chained on the one before (a block means its whole prefix)."""
    out: list[str] = []
    previous = b""
    for i in range(0, len(tokens) - size + 1, size):
        previous = hashlib.blake2b(previous + "\x1f".join(tokens[i:i + size]).encode(), digest_size=8).digest()
        out.append(previous.hex())
    return out


def between(text: str, start: str, end: str) -> str:
    a = text.find(start)
    b = text.find(end, a + len(start)) if a >= 0 else -1
    return text[a + len(start):b] if a >= 0 and b >= 0 else ""


class Replica:
    def __init__(self, name: str, config: Config, log: Path | None):
        self.name, self.config, self.log_path = name, config, log
        self.restart()

    def restart(self) -> None:
        """A process started again: an empty cache, nothing in flight, new counters."""
        self.cache: OrderedDict[str, None] = OrderedDict()
        self.prefill = asyncio.Lock()
        self.slots = asyncio.Semaphore(self.config.slots)
        self.epoch = uuid.uuid4().hex  # requests of an earlier life are dropped, never answered
        self.stats = {"requests": 0, "answered": 0, "prompt_tokens": 0, "cached_tokens": 0, "prefill_tokens": 0,
                      "prefill_s": 0.0, "output_tokens": 0, "evicted_blocks": 0, "queued_max": 0}
        self.waiting = 0

    def lookup(self, hashes: list[str]) -> int:
        """Blocks found from the start (each refreshed: least recently used goes first)."""
        found = 0
        for h in hashes:
            if h not in self.cache:
                break
            self.cache.move_to_end(h)
            found += 1
        return found

    def insert(self, hashes: Iterable[str]) -> None:
        for h in hashes:
            self.cache[h] = None
            self.cache.move_to_end(h)
        while len(self.cache) > self.config.capacity_blocks:
            self.cache.popitem(last=False)
            self.stats["evicted_blocks"] += 1

    def write_log(self, line: dict[str, Any]) -> None:
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(line) + "\n")

    async def complete(self, body: dict[str, Any], prefilled: asyncio.Event | None = None) -> dict[str, Any]:
        """One request through the queue, the prefill and the decode; its usage and text.
        ``prefilled`` is set when its first token would be out (a stream's first event)."""
        c, epoch = self.config, self.epoch
        prompt = template(body.get("messages") or [])
        tokens = TOKEN.findall(prompt)
        hashes = block_hashes(tokens, c.block_tokens)
        user = content_text((body.get("messages") or [{}])[-1].get("content"))
        document = hashlib.blake2b(between(user, "<document>", "</document>").encode(), digest_size=6).hexdigest()
        chunk_text = between(user, "<chunk>", "</chunk>")
        chunk = hashlib.blake2b(chunk_text.encode(), digest_size=6).hexdigest()
        self.stats["requests"] += 1
        self.waiting += 1
        self.stats["queued_max"] = max(self.stats["queued_max"], self.waiting)
        line: dict[str, Any] = {"id": uuid.uuid4().hex, "replica": self.name, "arrived": time.time(),
                                "document": document, "chunk": chunk, "prompt_tokens": len(tokens)}
        self.write_log(line)  # at once: a replica killed later leaves its arrivals behind
        async with self.slots:
            self.waiting -= 1
            while c.stall:  # a replica that hangs: the client's timeout ends the call
                await asyncio.sleep(0.2)
            async with self.prefill:
                line["prefill_start"] = time.time()
                cached = self.lookup(hashes) * c.block_tokens
                computed = len(tokens) - cached
                seconds = c.base_latency_s + computed / 1000 * c.prefill_s_per_ktok
                await asyncio.sleep(seconds)
                if epoch != self.epoch:
                    raise ConnectionResetError("restarted")
                self.insert(hashes)  # a prefix is cached once its prefill is done
                line["prefill_end"] = time.time()
                self.write_log({"id": line["id"], "prefill_start": line["prefill_start"],
                                "prefill_end": line["prefill_end"], "blocks": hashes})
            if prefilled is not None:
                prefilled.set()
            self.stats["prompt_tokens"] += len(tokens)
            self.stats["cached_tokens"] += cached
            self.stats["prefill_tokens"] += computed
            self.stats["prefill_s"] += seconds
            text = (f"From the document that begins \"{' '.join(user.split()[1:9])}\": "
                    f"this part covers {' '.join(chunk_text.split()[:10])}.")
            out_tokens = min(int(body.get("max_tokens") or body.get("max_completion_tokens") or 256),
                             len(TOKEN.findall(text)))
            await asyncio.sleep(out_tokens * c.decode_s_per_tok)
            if epoch != self.epoch:
                raise ConnectionResetError("restarted")
            self.stats["output_tokens"] += out_tokens
            self.stats["answered"] += 1
            self.write_log({"id": line["id"], "answered": True, "cached_tokens": cached, "done": time.time()})
            usage: dict[str, Any] = {"prompt_tokens": len(tokens), "completion_tokens": out_tokens,
                                     "total_tokens": len(tokens) + out_tokens}
            if c.report_cache:
                usage["prompt_tokens_details"] = {"cached_tokens": cached}
            return {"text": text, "usage": usage}


def make_app(replica: Replica) -> FastAPI:
    app = FastAPI(title=f"OpenAI-compatible replica stand-in {replica.name}")

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "standin", "object": "model", "owned_by": "situate"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        created, rid, model = int(time.time()), f"chatcmpl-{uuid.uuid4().hex[:12]}", body.get("model", "")
        if not body.get("stream"):
            result = await replica.complete(body)
            return {"id": rid, "object": "chat.completion", "created": created, "model": model,
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": result["text"]},
                                 "finish_reason": "stop"}], "usage": result["usage"]}
        prefilled = asyncio.Event()
        work = asyncio.ensure_future(replica.complete(body, prefilled))
        waiting = asyncio.ensure_future(prefilled.wait())
        await asyncio.wait([work, waiting], return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if work.done() and work.exception() is not None:
            raise work.exception()  # type: ignore[misc]

        async def events() -> AsyncIterator[str]:
            def chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> str:
                choices = [] if usage is not None else [{"index": 0, "delta": delta, "finish_reason": finish}]
                event = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                         "choices": choices, **({"usage": usage} if usage is not None else {})}
                return f"data: {json.dumps(event)}\n\n"

            yield chunk({"role": "assistant", "content": ""})  # the first token is out: the prefix is cached
            result = await work
            for word in result["text"].split(" "):
                yield chunk({"content": word + " "})
            yield chunk({}, "stop")
            if (body.get("stream_options") or {}).get("include_usage"):
                yield chunk({}, usage=result["usage"])
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.get("/standin/stats")
    async def stats() -> dict[str, Any]:
        return {"name": replica.name, **replica.stats, "cache_blocks": len(replica.cache), "config": asdict(replica.config)}

    @app.post("/standin/config")
    async def configure(request: Request) -> Any:
        for k, v in (await request.json()).items():
            if not hasattr(replica.config, k):
                return JSONResponse({"error": f"unknown setting {k}"}, status_code=400)
            setattr(replica.config, k, v)
        return asdict(replica.config)

    @app.post("/standin/restart")
    async def restart() -> dict[str, Any]:
        replica.restart()
        return {"ok": True}

    return app


def read_log(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The requests the replicas logged, one dict each (what a killed replica never got to is absent)."""
    by_id: dict[str, dict[str, Any]] = {}
    for path in paths:
        if path.exists():
            for raw in path.read_text().splitlines():
                if raw.strip():
                    event = json.loads(raw)
                    by_id.setdefault(event["id"], {"answered": False}).update(event)
    return list(by_id.values())


def shared_cache_reads(lines: list[dict[str, Any]], capacity_blocks: int, block_tokens: int) -> int:
    """The tokens one cache shared by every replica (``capacity_blocks`` in all) would have served
    the same requests: each looks up its blocks when its prefill starts and adds them when it ends,
    in the order those happened across the fleet."""
    events: list[tuple[float, int, int]] = []
    for i, line in enumerate(lines):
        if "prefill_start" in line:
            events.append((line["prefill_start"], 0, i))
            events.append((line.get("prefill_end", line["prefill_start"]), 1, i))
    cache: OrderedDict[str, None] = OrderedDict()
    read = 0
    for _, kind, i in sorted(events):
        blocks = lines[i]["blocks"]
        if kind == 0:
            if not lines[i].get("answered"):
                continue
            for h in blocks:
                if h not in cache:
                    break
                cache.move_to_end(h)
                read += block_tokens
        else:
            for h in blocks:
                cache[h] = None
                cache.move_to_end(h)
            while len(cache) > capacity_blocks:
                cache.popitem(last=False)
    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--name", default="replica")
    parser.add_argument("--config", default="{}", help="JSON overrides of the Config fields")
    parser.add_argument("--log", default="", help="a JSON line per request, appended here")
    args = parser.parse_args()
    import uvicorn

    replica = Replica(args.name, Config(**json.loads(args.config)), Path(args.log) if args.log else None)
    uvicorn.run(make_app(replica), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
