"""The stand-in's Message Batches routes (``/v1/messages/batches``), with the API's limits: a
batch runs its requests one after another after ``batch_delay_s``, through the same cache as live
calls, so a seed request's cache entry is read by the batch that follows it, as on the real API.

Limits, settable so a test can make them bite (``standin.Config``), answered with the API's own
error shapes:

- requests per minute across the Batches endpoints (creations, retrievals, listings, result
  fetches: ``batch_rpm``; the first tier's 50): 429 ``rate_limit_error`` with ``retry-after``;
- requests waiting in the processing queue (``batch_queue_limit``; the first tier's 100,000): a
  creation that would pass it gets the same 429;
- a batch's size: at most ``batch_max_requests`` requests (400 ``invalid_request_error``) and
  ``batch_max_bytes`` bytes (413 ``request_too_large``).

Faults for tests: a request whose chunk instruction holds ``fail_marker`` errors (its result
``errored``, the others succeed); one holding ``batch_expire_marker`` expires (as a batch not done
within 24 hours leaves its unprocessed requests), the first time it is asked.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response


def register(app: FastAPI, standin: Any, *, blocks_of: Callable, usage_json: Callable, error: Callable,
             count_tokens: Callable) -> None:
    """``standin`` is the shared ``standin.StandIn``; the functions are the Messages API's own
    (passed in, so that this module needs nothing back from ``standin``)."""
    def limited() -> Response | None:
        """One request of the Batches API's per-minute budget, or its 429."""
        standin.stats["batch_api_requests"] = standin.stats.get("batch_api_requests", 0) + 1
        rpm = standin.config.batch_rpm
        if not rpm:
            return None
        bucket = standin.batch_bucket(rpm)
        wait = bucket.wait_for(1)
        if wait > 0:
            standin.stats["batch_api_429"] = standin.stats.get("batch_api_429", 0) + 1
            return error(429, "rate_limit_error", f"Number of Batches API requests has exceeded your per-minute rate "
                         f"limit ({rpm})", max(1, math.ceil(wait)))
        bucket.level -= 1
        return None

    def in_queue() -> int:
        return sum(b["counts"]["processing"] for b in standin.batches.values() if b["processing_status"] == "in_progress")

    def batch_view(b: dict[str, Any], base: str) -> dict[str, Any]:
        done = b["processing_status"] == "ended"
        return {"id": b["id"], "type": "message_batch", "processing_status": b["processing_status"],
                "request_counts": b["counts"], "created_at": b["created_at"],
                "expires_at": b["expires_at"], "ended_at": b.get("ended_at"), "archived_at": None,
                "cancel_initiated_at": None,
                "results_url": f"{base}/v1/messages/batches/{b['id']}/results" if done else None}

    def result(req: dict[str, Any], kind: str, message: dict[str, Any] | None = None) -> dict[str, Any]:
        if kind == "succeeded":
            return {"custom_id": req["custom_id"], "result": {"type": "succeeded", "message": message}}
        if kind == "errored":
            return {"custom_id": req["custom_id"], "result": {"type": "errored", "error": {
                "type": "error", "error": {"type": "invalid_request_error", "message": "this prompt is refused "
                                                                                      "(fail_marker)"}}}}
        return {"custom_id": req["custom_id"], "result": {"type": kind}}

    async def run_batch(batch: dict[str, Any]) -> None:
        await asyncio.sleep(standin.config.batch_delay_s)
        for req in batch["requests"]:
            params = req["params"]
            blocks, ttl = blocks_of(params)
            last = blocks[-1][0] if blocks else ""
            batch["counts"]["processing"] -= 1
            if standin.config.fail_marker and standin.config.fail_marker in last:
                batch["results"].append(result(req, "errored"))
                batch["counts"]["errored"] += 1
                continue
            if standin.config.batch_expire_marker and standin.config.batch_expire_marker in last \
                    and last not in standin.expired:  # once: asked again, it is processed
                standin.expired.add(last)
                batch["results"].append(result(req, "expired"))
                batch["counts"]["expired"] += 1
                continue
            span = standin.begin()
            standin.stats["batch_requests"] += 1
            u = standin.plan(params["model"], blocks, ttl)
            standin.commit_write(u, time.monotonic(), ttl)  # batches run one after another here
            full = "".join(t for t, _ in blocks)
            text = standin.answer(full, int(params.get("max_tokens", 256)))
            u["output_tokens"] = count_tokens(text)
            standin.end(u, params["model"] + full, span)
            batch["results"].append(result(req, "succeeded", {
                "id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant",
                "model": params["model"], "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn", "stop_sequence": None, "usage": usage_json(u, ttl)}))
            batch["counts"]["succeeded"] += 1
            if len(batch["results"]) % 200 == 0:
                await asyncio.sleep(0)  # the other routes answer meanwhile
        batch["processing_status"] = "ended"
        batch["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    @app.post("/v1/messages/batches")
    async def create_batch(request: Request):
        if (refused := limited()) is not None:
            return refused
        raw = await request.body()
        if len(raw) > standin.config.batch_max_bytes:
            standin.stats["batch_refused_size"] += 1
            return error(413, "request_too_large", f"Request exceeds the maximum size of "
                         f"{standin.config.batch_max_bytes} bytes")
        body = json.loads(raw)
        requests = body["requests"]
        if len(requests) > standin.config.batch_max_requests:
            standin.stats["batch_refused_size"] += 1
            return error(400, "invalid_request_error", f"requests: a batch may hold at most "
                         f"{standin.config.batch_max_requests} requests")
        if standin.config.batch_queue_limit and in_queue() + len(requests) > standin.config.batch_queue_limit:
            standin.stats["batch_queue_429"] += 1
            return error(429, "rate_limit_error", "Number of requests in the processing queue exceeds your "
                         f"rate limit ({standin.config.batch_queue_limit})", 30)
        standin.stats["batch_creations"] += 1
        batch_id = "msgbatch_" + uuid.uuid4().hex[:20]
        now = time.time()
        batch = {"id": batch_id, "requests": requests, "results": [], "processing_status": "in_progress",
                 "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                 "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 86400)),
                 "counts": {"processing": len(requests), "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}}
        standin.batches[batch_id] = batch
        asyncio.get_running_loop().create_task(run_batch(batch))
        return batch_view(batch, str(request.base_url).rstrip("/"))

    @app.get("/v1/messages/batches")
    async def list_batches(request: Request, limit: int = 20):
        if (refused := limited()) is not None:
            return refused
        newest = sorted(standin.batches.values(), key=lambda b: b["created_at"], reverse=True)[:limit]
        base = str(request.base_url).rstrip("/")
        data = [batch_view(b, base) for b in newest]
        return {"data": data, "has_more": len(standin.batches) > limit,
                "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None}

    @app.get("/v1/messages/batches/{batch_id}")
    async def get_batch(batch_id: str, request: Request):
        if (refused := limited()) is not None:
            return refused
        batch = standin.batches.get(batch_id)
        if not batch:
            return error(404, "not_found_error", "no such batch")
        return batch_view(batch, str(request.base_url).rstrip("/"))

    @app.get("/v1/messages/batches/{batch_id}/results")
    async def batch_results(batch_id: str):
        if (refused := limited()) is not None:
            return refused
        batch = standin.batches.get(batch_id)
        if not batch or batch["processing_status"] != "ended":
            return error(404, "not_found_error", "results not ready")
        return Response("\n".join(json.dumps(r) for r in batch["results"]) + "\n", media_type="application/binary")
