"""The stand-in's Message Batches routes (``/v1/messages/batches``): a batch runs its requests
one after another after ``batch_delay_s``, through the same cache as live calls, so a seed
request's cache entry is read by the batch that follows it, as on the real API."""

from __future__ import annotations

import asyncio
import json
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
    def batch_view(b: dict[str, Any], base: str) -> dict[str, Any]:
        done = b["processing_status"] == "ended"
        return {"id": b["id"], "type": "message_batch", "processing_status": b["processing_status"],
                "request_counts": b["counts"], "created_at": b["created_at"],
                "expires_at": b["created_at"], "ended_at": b.get("ended_at"), "archived_at": None,
                "cancel_initiated_at": None,
                "results_url": f"{base}/v1/messages/batches/{b['id']}/results" if done else None}

    async def run_batch(batch: dict[str, Any]) -> None:
        await asyncio.sleep(standin.config.batch_delay_s)
        for req in batch["requests"]:
            params = req["params"]
            blocks, ttl = blocks_of(params)
            span = standin.begin()
            standin.stats["batch_requests"] += 1
            u = standin.plan(params["model"], blocks, ttl)
            standin.commit_write(u, time.monotonic(), ttl)  # batches run one after another here
            full = "".join(t for t, _ in blocks)
            text = standin.answer(full, int(params.get("max_tokens", 256)))
            u["output_tokens"] = count_tokens(text)
            standin.end(u, params["model"] + full, span)
            batch["results"].append({"custom_id": req["custom_id"], "result": {"type": "succeeded", "message": {
                "id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant",
                "model": params["model"], "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn", "stop_sequence": None, "usage": usage_json(u, ttl)}}})
            batch["counts"]["processing"] -= 1
            batch["counts"]["succeeded"] += 1
        batch["processing_status"] = "ended"
        batch["ended_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    @app.post("/v1/messages/batches")
    async def create_batch(request: Request):
        body = await request.json()
        batch_id = "msgbatch_" + uuid.uuid4().hex[:20]
        batch = {"id": batch_id, "requests": body["requests"], "results": [], "processing_status": "in_progress",
                 "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "counts": {"processing": len(body["requests"]), "succeeded": 0, "errored": 0,
                            "canceled": 0, "expired": 0}}
        standin.batches[batch_id] = batch
        asyncio.get_running_loop().create_task(run_batch(batch))
        return batch_view(batch, str(request.base_url).rstrip("/"))

    @app.get("/v1/messages/batches/{batch_id}")
    async def get_batch(batch_id: str, request: Request):
        batch = standin.batches.get(batch_id)
        if not batch:
            return error(404, "not_found_error", "no such batch")
        return batch_view(batch, str(request.base_url).rstrip("/"))

    @app.get("/v1/messages/batches/{batch_id}/results")
    async def batch_results(batch_id: str):
        batch = standin.batches.get(batch_id)
        if not batch or batch["processing_status"] != "ended":
            return error(404, "not_found_error", "results not ready")
        return Response("\n".join(json.dumps(r) for r in batch["results"]) + "\n", media_type="application/binary")

