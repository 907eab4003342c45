"""Process settings, read once from ``SITUATE_*`` environment variables.

These describe *where things are* (Redis, OpenSearch, S3) and *how this process behaves*
(shard count, limits, timeouts). Settings that shape an index — contextualizer, model,
embedder, language, chunking — are defaults only: they are frozen into a collection when it
is created (see ``storage.catalog``) and every worker follows the stored copy, whatever its own
environment says. Secrets (API keys) are read by the provider clients from their usual
variables and never copied into a collection, a message or a log line; ``Credentials`` says
which are set (and gives the log filter their values to remove).

This is the one module that reads the environment; the others ask it. A value a command decides
for its own process (``situate worker``: threads per embedder; ``situate api``: its address)
is given with ``override``, never by writing an environment variable for another module to read.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SITUATE_", extra="ignore", populate_by_name=True)

    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_ca_certs: str = ""          # CA bundle for rediss:// with a private CA
    # sentinel://host:26379;sentinel://host2:26379 URLs: the master's name, the sentinels' password.
    redis_sentinel_master: str = ""
    redis_sentinel_password: str = ""
    opensearch_url: str = "http://127.0.0.1:9200"
    opensearch_ca_certs: str = ""     # CA bundle for https:// with a private CA
    opensearch_auth: str = ""         # "sigv4": Amazon OpenSearch Service, boto3 credentials
    opensearch_region: str = ""
    opensearch_service: str = "es"    # "aoss" for OpenSearch Serverless
    # Bodies are stored once and passed by reference; "redis" or "s3://bucket/prefix".
    body_store: str = "redis"

    # Fairness between collections (storage/fairqueue.py): how many messages each Celery queue may
    # hold ahead of its workers; the rest wait in one line per collection, let in round robin.
    # More: less chance a worker waits on the gate; fewer: a quieter collection waits less.
    queue_ahead: int = 8

    # Number of situate.N queues. Only workers use it (the ingest task picks the shard), so
    # producers and workers cannot disagree; changing it only moves future documents.
    shards: int = 4

    # Per-collection defaults (frozen into a collection at creation).
    contextualizer: str = "keywords"
    model: str = ""
    embedder: str = ""  # "": by language (workers.lifecycle.EMBEDDER_FOR_LANGUAGE)
    embed_model: str = ""
    language: str = "english"
    chunk_tokens: int = 300
    chunk_overlap: int = 0
    embed_context: bool | None = None
    context_weight: float = 1.0
    fusion: str = "rrf"
    dense_weight: float | None = None  # None: by what the collection holds (code / prose)
    rrf_k: int | None = None  # None: by what the collection holds (text / paged documents)
    # Search-time: the default reranker (none | voyage | bedrock | cohere | onnx), overridable
    # per query; see producers/retrieval/rerankers.py for each one's settings.
    reranker: str = "none"
    rerank_model: str = ""   # the API reranker's model (default: workers/models.py's)
    rerank_onnx: str = ""    # the onnx reranker's file (a tokenizer.json beside it)
    cohere_url: str = "https://api.cohere.com"
    # Voyage's endpoint (the SDK's own variable; a stand-in or a proxy), "" for Voyage's.
    voyage_base_url: str = Field("", validation_alias=AliasChoices("VOYAGE_BASE_URL"))
    log_format: Literal["json", "text"] = "json"

    # Input limits: a document over this size fails alone with a reason (a file to extract, a PDF:
    # its original bytes).
    max_document_bytes: int = 64_000_000
    max_chunks_per_document: int = 20_000
    # Extracting a file (workers/extraction/), per document: pages, bytes of text (UTF-8; the name
    # it had when it counted characters still works), wall time, the extracting process's memory,
    # and CPU seconds per page read (after 10 s any file may take). Generous for real reports
    # (500+ pages); a file built to be slow to read fails within seconds.
    max_pages: int = 2000
    max_extracted_bytes: int = Field(20_000_000, validation_alias=AliasChoices(
        "SITUATE_MAX_EXTRACTED_BYTES", "SITUATE_MAX_EXTRACTED_CHARS"))
    extract_timeout_s: float = 300
    extract_memory_mb: int = 2048
    extract_cpu_s_per_page: float = 0.25

    # Delivery (see workers/pipeline/delivery.py). A worker that dies has its documents taken
    # up by another within ``recovery_s``; a live worker's tasks are never taken from it,
    # however long they run (its heartbeat keeps them). A message whose process died
    # ``max_deliveries`` times fails its document instead of being delivered again.
    recovery_s: float = 60
    max_deliveries: int = 3
    # How long a stage keeps retrying, in place, while Redis or OpenSearch is unreachable.
    transient_patience_s: float = 900
    task_time_limit_s: int = 3000
    # A submission of a version already in flight is queued again only when it has not moved
    # for this long (its message was lost, say with a Redis that persisted nothing).
    stale_after_s: float = 3600
    # The reconciler (pipeline.reconcile): a document in flight that has not moved for this long,
    # with no message anywhere, is sent on again; a pass at most this often in the fleet (0: off).
    reconcile_after_s: float = 180
    reconcile_every_s: float = 30

    # Defaults for a new collection's index (see storage.catalog.CollectionConfig).
    index_shards: int = 1
    index_replicas: str = "0-1"
    vectors: Literal["float", "lucene-sq", "byte"] = "float"

    # Rebuilding a collection (``situate reindex``; workers/pipeline/rebuild.py). Each indexed
    # document's body is kept, compressed, to rebuild from (false: none; a rebuild then reuses
    # the indexed chunks as they are). A rebuild keeps at most ``reindex_window`` documents in
    # flight; switching generations holds new submissions for at most ``reindex_pause_s`` while
    # the last ones land; the old generation stays for a rollback ``reindex_keep_s``.
    keep_text: bool = True
    # And each file's original bytes, to draw the pages hits cite (the search page): in Redis
    # within this many MB for all collections (in S3, no limit of ours).
    keep_originals: bool = True
    keep_originals_mb: int = 512

    # What ``situate worker`` plans for memory (producers/cli/processes.py): per pool process
    # (its own embedders: measured ~300 MB with both local models), per thread of a threads
    # pool. A pool that cannot fit in the machine's available memory is refused (0: no check).
    worker_process_mb: int = 400
    worker_thread_mb: int = 60
    reindex_window: int = 500
    reindex_pause_s: float = 60
    reindex_keep_s: float = 7 * 24 * 3600

    # Texts per call into a local ONNX encoder. One: measured on one thread, e5-small int8 embeds
    # 25 cookbook chunks per CPU-second one at a time against 15 in length-sorted batches of 32
    # (MiniLM 17 against 9, multilingual-e5 the same either way), in a third of the memory, and
    # a chunk's vector no longer depends on its batch (e5's and bge's int8 activations are
    # scaled per call).
    embed_batch_size: int = 1
    # Where model files from outside PyPI are unpacked (``situate models fetch``; "": the
    # installation's share/situate/models).
    model_files: str = ""
    # ONNX / C threads per process (0: the library's default, every core); ``situate worker``
    # sets cores / processes so that pool processes do not oversubscribe the CPU.
    embed_threads: int = 0
    # Models of the operator's own, or corrections to ours, as JSON (workers/models.py).
    models: str = ""
    # A new collection's ``embed_tail``: how much of a paged document's chunk past a local
    # embedder's 256 tokens counts in its vector (0: cut there; 1: as much as the head; see
    # workers/embedding/local.py and pipeline/stages.tail_weight: a text's chunks are cut).
    embed_tail: float = Field(0.25, ge=0, le=1)
    # A new collection's ``embed_header``: what of an extracted document's offline header goes
    # into its chunks' vectors (workers/contextualizers/header.py): "cover", "all", "none".
    embed_header: Literal["cover", "all", "none"] = "cover"

    # LLM contextualizers (see workers/contextualizers/claude/). Concurrency is per worker process.
    llm_concurrency: int = 16
    # A document may use the whole worker bound when alone; several share it first come, first served.
    llm_document_concurrency: int = 16
    llm_max_attempts: int = 8              # 529/5xx/connection errors/timeouts per chunk
    llm_timeout_s: float = 120             # one call; a slower answer is retried (and may be paid twice)
    # Any other call out of the process (embedders, rerankers, S3): how long it waits for an answer
    # before it is a timeout, retried (workers/faults.py).
    provider_timeout_s: float = 120
    llm_rate_limit_patience_s: float = 900  # how long a chunk keeps retrying 429s
    llm_max_output_tokens: int = 200
    llm_max_context_chars: int = 1500
    # Over this (estimated) size a document is situated in windows (contextualizers/windows.py):
    # its opening, then the window of its own section the chunk is in, each cached once.
    llm_max_document_tokens: int = 60_000
    llm_long_doc_opening_tokens: int = 3_000
    llm_long_doc_window_tokens: int = 12_000
    # Account limits per model, e.g. {"claude-haiku-5-5": {"rpm": 4000, "itpm": 400000, "otpm": 80000}};
    # models not listed use the defaults in workers/models.py.
    rate_limits: dict[str, dict[str, int]] = {}
    # Message Batches mode: how often a pending batch is polled.
    batch_poll_s: float = 30.0
    # Bucket capacity in seconds of the limit (60 = a full minute's worth, as Anthropic).
    rate_limit_burst_s: float = 60.0
    # The local llama contextualizer (optional extra): default GGUF file, window, threads.
    llama_model: str = ""
    llama_n_ctx: int = 4096
    llama_threads: int = 0  # 0: llama.cpp's default
    llama_allow_amx: bool = False  # see contextualizers/llama.py: AMX builds crashed here
    # The API (see producers/web/auth.py). The admin token; the address it is bound to (set by
    # ``situate api``): beyond loopback, it refuses to start without a token.
    api_token: str = ""
    api_host: str = "127.0.0.1"
    # How long a browser stays signed in to /dashboard (producers/web/dashboard.py).
    dashboard_session_s: int = 8 * 3600
    # ``situate flower``: basic auth (required beyond loopback). OAuth: Flower's own
    # FLOWER_OAUTH2_* variables and --auth, passed through as they are.
    flower_user: str = ""
    flower_password: str = ""
    flower_oauth: str = Field("", validation_alias=AliasChoices("FLOWER_AUTH"))  # Flower's own variable
    # A request body over this is refused whole (413), chunked uploads included; a request
    # with more documents than max_batch_documents likewise.
    max_request_bytes: int = 72_000_000
    max_batch_documents: int = 1000
    # Near Redis's maxmemory, producers are told 503 + Retry-After instead of filling it.
    redis_memory_high_water: float = 0.85
    # What collections may use: "contextualizer" or "contextualizer:model", comma-separated, "*"
    # for anything. The paid models beyond the default are the operator's choice, not a caller's.
    allowed_models: str = "none,structural,keywords,llama,anthropic:claude-haiku-5-5,bedrock:claude-haiku-5-5"
    # Likewise for embedders (``name`` or ``name:model``) and the rerankers a query may name; the
    # operator's own SITUATE_EMBEDDER / SITUATE_RERANKER are always allowed (workers/allowlist.py).
    allowed_embedders: str = "local-e5,local-bge,local,local-multilingual"
    allowed_rerankers: str = "none,onnx"
    # Local GGUF files (the llama contextualizer) are read from this folder only.
    models_dir: str = ""
    # Python modules imported by workers and producers before they look a contextualizer up:
    # each may register its own (``workers.contextualizers.registry.register``).
    plugins: str = ""


    @property
    def heartbeat_s(self) -> float:
        """How often a worker marks what it holds as alive."""
        return max(0.5, self.recovery_s / 6)

    @property
    def visibility_timeout_s(self) -> float:
        """How long a held message may go without a heartbeat before another worker takes it:
        several heartbeats, so a busy moment is not a death; then a sweep (every heartbeat_s)."""
        return max(2.0, self.recovery_s * 0.6)

    @property
    def lease_s(self) -> int:
        return max(2, round(self.visibility_timeout_s))


class Credentials(BaseSettings):
    """The secrets this process holds, under the names their SDKs read (which read them
    themselves): we only need to know which are set, and their values to redact from logs.
    Strings only, so reading them never fails, whatever else is misconfigured."""

    model_config = SettingsConfigDict(extra="ignore")

    anthropic_api_key: str = ""
    anthropic_auth_token: str = ""
    voyage_api_key: str = ""
    cohere_api_key: str = Field("", validation_alias=AliasChoices("CO_API_KEY", "COHERE_API_KEY"))
    aws_access_key_id: str = ""
    aws_secret_access_key: str = ""
    aws_session_token: str = ""
    aws_profile: str = ""
    aws_endpoint_url_bedrock_runtime: str = ""
    situate_api_token: str = ""
    situate_flower_password: str = ""
    situate_redis_sentinel_password: str = ""

    def secrets(self) -> list[str]:
        """Values to remove from every log line (long enough not to blank out ordinary words)."""
        kept = ("anthropic_api_key", "anthropic_auth_token", "voyage_api_key", "cohere_api_key",
                "aws_secret_access_key", "aws_session_token", "situate_api_token", "situate_flower_password",
                "situate_redis_sentinel_password")
        return [v for v in (getattr(self, name) for name in kept) if len(v) >= 8]


_overrides: dict[str, Any] = {}


def override(**values: Any) -> None:
    """Settings this process chose itself, over the environment's (and inherited by the pool
    processes it forks)."""
    _overrides.update(values)
    get_settings.cache_clear()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings(**_overrides)


@lru_cache(maxsize=1)
def get_credentials() -> Credentials:
    return Credentials()
