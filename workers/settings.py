"""Process settings, read once from ``SITUATE_*`` environment variables.

These describe *where things are* (Redis, OpenSearch, S3) and *how this process behaves*
(shard count, limits, timeouts). Settings that shape an index — contextualizer, model,
embedder, language, chunking — are defaults only: they are frozen into a collection when it
is created (see ``collections``) and every worker follows the stored copy, whatever its own
environment says. Secrets (API keys) are read by the provider clients from their usual
variables and never copied into a collection, a message or a log line.
"""

from __future__ import annotations

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SITUATE_", extra="ignore")

    redis_url: str = "redis://127.0.0.1:6379/0"
    opensearch_url: str = "http://127.0.0.1:9200"
    # Bodies are stored once and passed by reference; "redis" or "s3://bucket/prefix".
    body_store: str = "redis"

    # Number of situate.N queues. Only workers use it (the ingest task picks the shard), so
    # producers and workers cannot disagree; changing it only moves future documents.
    shards: int = 4

    # Per-collection defaults (frozen into a collection at creation).
    contextualizer: str = "structural"
    model: str = ""
    embedder: str = "local"
    language: str = "english"
    chunk_tokens: int = 300
    chunk_overlap: int = 0

    # Input limits: a document over this size fails alone with a reason.
    max_document_bytes: int = 5_000_000
    max_chunks_per_document: int = 5_000

    # Celery: the Redis visibility timeout must exceed the longest task, or a running task is
    # delivered a second time. Hard time limit sits below it.
    visibility_timeout_s: int = 3600
    task_time_limit_s: int = 3000

    embed_batch_size: int = 32
    api_token: str = ""


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
