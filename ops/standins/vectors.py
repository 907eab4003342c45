"""The stand-in's embedding and rerank routes: Voyage (``/v1/embeddings``,
``/v1/contextualizedembeddings``, ``/v1/rerank``), Bedrock ``invoke_model`` for Titan and
Cohere embeddings and Cohere/Amazon rerank (``/model/{id}/invoke``), and Cohere's
``/v2/rerank``. Tests drive them through the real clients.

Faithful where our code could go wrong: request and response shapes, per-request caps
(texts, tokens; an oversized request is a 400 as the real APIs answer), usage fields, and
429 / 503 answers (``vector_faults``: the next N requests fail) so retries are exercised.
Vectors are deterministic and carry lexical meaning (hashed words), so a search through them
finds what it should; a contextualized chunk vector leans toward its document's vector.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from workers import models

_WORD = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def hashed_vector(text: str, dimension: int) -> np.ndarray:
    v = np.zeros(dimension, dtype=np.float64)
    for word in tokens(text):
        h = hashlib.blake2b(word.encode(), digest_size=8).digest()
        v[int.from_bytes(h[:4], "little") % dimension] += 1.0 if h[4] & 1 else -1.0
    norm = np.linalg.norm(v)
    return v / norm if norm else v


def overlap_score(query: str, document: str) -> float:
    q, d = set(tokens(query)), set(tokens(document))
    return len(q & d) / len(q) if q else 0.0


class VectorStats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.counts: Counter[str] = Counter()
        self.faults_left = 0
        self.fault_status = 429
        self.paid: Counter[str] = Counter()  # answers given, per request: one answered twice was paid twice

    def billed(self, path: str, body: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        """``answer``, counted as paid for this request (route and body)."""
        self.paid[hashlib.sha1((path + json.dumps(body, sort_keys=True)).encode()).hexdigest()] += 1
        return answer

    def as_json(self) -> dict[str, Any]:
        return {**self.counts, "paid_twice": sum(n - 1 for n in self.paid.values())}


def register(app: FastAPI, stats: VectorStats) -> None:
    def fault(kind: str) -> JSONResponse | None:
        stats.counts[f"{kind}_requests"] += 1
        if stats.faults_left <= 0:
            return None
        stats.faults_left -= 1
        status = stats.fault_status
        stats.counts[f"http_{status}"] += 1
        headers = {"retry-after": "1"} if status == 429 else {}
        if kind.startswith("bedrock"):
            headers["x-amzn-ErrorType"] = "ThrottlingException:" if status == 429 else "ServiceUnavailableException:"
        return JSONResponse({"detail": "Rate limit exceeded" if status == 429 else "Service unavailable",
                             "message": "Too many requests" if status == 429 else "Service unavailable"},
                            status_code=status, headers=headers)

    def model_of(body: dict[str, Any], table: dict, provider: str):
        """The requested model's row, or None (the route answers 400) if this API has no such model."""
        spec = table.get(body.get("model", ""))
        return spec if spec is not None and spec.provider == provider else None

    def unsupported(body: dict[str, Any]) -> JSONResponse:
        return JSONResponse({"detail": f"Model {body.get('model')} is not supported"}, status_code=400)

    def too_big(texts: list[str], spec: models.EmbeddingSpec) -> JSONResponse | None:
        total = sum(len(tokens(t)) for t in texts)
        if len(texts) > spec.max_texts or total > spec.max_request_tokens:
            return JSONResponse({"detail": f"request too large: {len(texts)} texts, {total} tokens"}, status_code=400)
        return None

    @app.post("/v1/embeddings")
    async def voyage_embed(request: Request):
        body = await request.json()
        if (answer := fault("voyage_embed")) is not None:
            return answer
        if (spec := model_of(body, models.EMBEDDING_MODELS, "voyage")) is None:
            return unsupported(body)
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        if (answer := too_big(texts, spec)) is not None:
            return answer
        stats.counts[f"input_type_{body.get('input_type')}"] += 1
        dim = body.get("output_dimension") or spec.dimension
        used = sum(len(tokens(t)) for t in texts)
        stats.counts["tokens"] += used
        return stats.billed(request.url.path, body, {
            "object": "list", "model": spec.id, "usage": {"total_tokens": used},
            "data": [{"object": "embedding", "index": i, "embedding": hashed_vector(t, dim).tolist()}
                     for i, t in enumerate(texts)]})

    @app.post("/v1/contextualizedembeddings")
    async def voyage_contextualized(request: Request):
        body = await request.json()
        if (answer := fault("voyage_context")) is not None:
            return answer
        if (spec := model_of(body, models.EMBEDDING_MODELS, "voyage-context")) is None:
            return unsupported(body)
        inputs: list[list[str]] = body["inputs"]
        for chunks in inputs:
            if sum(len(tokens(c)) for c in chunks) > spec.max_text_tokens:
                return JSONResponse({"detail": "an input exceeds the per-input token limit"}, status_code=400)
        stats.counts[f"input_type_{body.get('input_type')}"] += 1
        stats.counts["documents"] += len(inputs)
        dim = body.get("output_dimension") or spec.dimension
        data, used = [], 0
        for i, chunks in enumerate(inputs):
            vectors = [hashed_vector(c, dim) for c in chunks]
            document = hashed_vector(" ".join(chunks), dim)
            used += sum(len(tokens(c)) for c in chunks)
            embedded = []
            for j, v in enumerate(vectors):
                mixed = v + 0.5 * document if len(chunks) > 1 else v
                norm = np.linalg.norm(mixed)
                embedded.append({"object": "embedding", "index": j,
                                 "embedding": (mixed / norm if norm else mixed).tolist()})
            data.append({"object": "list", "index": i, "data": embedded})
        stats.counts["tokens"] += used
        return stats.billed(request.url.path, body, {"object": "list", "model": spec.id,
                                                     "usage": {"total_tokens": used}, "data": data})

    def ranked(query: str, documents: list[str], top: int | None) -> list[dict[str, Any]]:
        scores = [(overlap_score(query, d), i) for i, d in enumerate(documents)]
        scores.sort(key=lambda s: (-s[0], s[1]))
        return [{"index": i, "relevance_score": round(s, 6)} for s, i in scores[:top or len(documents)]]

    @app.post("/v1/rerank")
    async def voyage_rerank(request: Request):
        body = await request.json()
        if (answer := fault("voyage_rerank")) is not None:
            return answer
        if (spec := model_of(body, models.RERANK_MODELS, "voyage")) is None:
            return unsupported(body)
        if len(body["documents"]) > spec.max_documents:
            return JSONResponse({"detail": "too many documents"}, status_code=400)
        used = len(tokens(body["query"])) * len(body["documents"]) + sum(len(tokens(d)) for d in body["documents"])
        return stats.billed(request.url.path, body, {"object": "list", "model": spec.id, "usage": {"total_tokens": used},
                                                     "data": ranked(body["query"], body["documents"], body.get("top_k"))})

    @app.post("/v2/rerank")
    async def cohere_rerank(request: Request):
        body = await request.json()
        if (answer := fault("cohere_rerank")) is not None:
            return answer
        stats.counts["cohere_authorized"] += request.headers.get("authorization", "").startswith("Bearer ")
        return stats.billed(request.url.path, body, {
            "id": "rerank-standin", "results": ranked(body["query"], body["documents"], body.get("top_n")),
            "meta": {"billed_units": {"search_units": 1}}})

    @app.post("/model/{model_id:path}/invoke")
    async def bedrock_invoke(model_id: str, request: Request):
        body = await request.json()
        if (answer := fault("bedrock_invoke")) is not None:
            return answer
        stats.counts[f"bedrock_{model_id}"] += 1
        rerank = models.RERANK_MODELS.get(model_id)
        if rerank is not None and rerank.provider == "bedrock":
            if model_id.startswith("cohere.") and body.get("api_version") != 2:
                return JSONResponse({"message": "api_version 2 is required"}, status_code=400,
                                    headers={"x-amzn-ErrorType": "ValidationException:"})
            return stats.billed(request.url.path, body, {
                "id": "rerank-standin", "results": ranked(body["query"], body["documents"], body.get("top_n"))})
        spec = models.EMBEDDING_MODELS.get(model_id)
        if spec is None or spec.provider != "bedrock":
            return JSONResponse({"message": f"The provided model identifier is invalid: {model_id}"}, status_code=400,
                                headers={"x-amzn-ErrorType": "ValidationException:"})
        if model_id.startswith("cohere."):
            texts = body["texts"]
            if (answer := too_big(texts, spec)) is not None:
                return answer
            stats.counts[f"input_type_{body.get('input_type')}"] += 1
            return stats.billed(request.url.path, body, {
                "id": "embed-standin", "response_type": "embeddings_floats", "texts": texts,
                "embeddings": [hashed_vector(t, spec.dimension).tolist() for t in texts]})
        text = body["inputText"]
        if len(tokens(text)) > spec.max_text_tokens:
            return JSONResponse({"message": "Too many input tokens"}, status_code=400,
                                headers={"x-amzn-ErrorType": "ValidationException:"})
        vector = hashed_vector(text, int(body.get("dimensions", spec.dimension)))
        return stats.billed(request.url.path, body, {"embedding": vector.tolist(), "inputTextTokenCount": len(tokens(text)),
                                                     "embeddingsByType": {"float": vector.tolist()}})
