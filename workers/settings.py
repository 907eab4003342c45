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

    # ## Where things are
    redis_url: str = "redis://127.0.0.1:6379/0"  # broker, document states, checkpoints; rediss:// for TLS; sentinel://host:26379;sentinel://host2:26379 for Sentinel
    redis_ca_certs: str = ""          # CA bundle for rediss:// with a private CA
    redis_sentinel_master: str = ""   # with sentinel:// URLs: the master's name
    redis_sentinel_password: str = ""  # with sentinel:// URLs: the sentinels' password
    opensearch_url: str = "http://127.0.0.1:9200"  # several nodes comma-separated; https://user:pass@host:9200
    opensearch_ca_certs: str = ""     # CA bundle for https:// with a private CA
    opensearch_auth: str = ""         # "sigv4": Amazon OpenSearch Service, boto3's credentials
    opensearch_region: str = ""       # with sigv4: the region
    opensearch_service: str = "es"    # with sigv4: "es", or "aoss" for OpenSearch Serverless
    body_store: str = "redis"         # where document bodies wait for the workers: "redis" or "s3://bucket/prefix"
    log_format: Literal["json", "text"] = "json"  # JSON lines (secrets removed), or text for humans
    plugins: str = ""                 # Python modules imported by workers and producers first: each may register contextualizers of its own

    # ## Defaults for new collections
    # Frozen into a collection when it is created (from the producer's environment, or its flags);
    # every worker follows the stored copy, whatever its own environment says.
    contextualizer: str = "keywords"  # keywords, structural, none, anthropic, bedrock, openai, llama
    model: str = ""                   # the LLM model ("": the contextualizer's default)
    embedder: str = ""                # "": by language (local-e5 for English, local-multilingual for French and German)
    embed_model: str = ""             # an API embedder's model ("": its default)
    language: str = "english"         # english, french, german: the analyzers and the default embedder
    chunk_tokens: int = 300           # chunk size in tokens
    chunk_overlap: int = 0            # overlap between chunks in tokens
    embed_context: bool | None = None  # embed context + chunk (unset: yes for LLM contexts, no for offline ones)
    context_weight: float = 1.0       # BM25 weight of the context field against the chunk's text
    fusion: str = "rrf"               # rrf (ranks) or weighted (min-max scores)
    dense_weight: float | None = None  # the vectors' weight in fusion (unset: by the collection's share of code)
    rrf_k: int | None = None          # RRF's k (unset: by the collection's share of paged chunks)
    embed_tail: float = Field(0.25, ge=0, le=1)  # weight of a paged chunk's tokens past a local embedder's 256 (0: cut there)
    embed_header: Literal["cover", "all", "none"] = "cover"  # what of an extracted document's offline header the vectors read
    index_shards: int = Field(0, ge=0, le=64)  # a new index's primary shards (0: by the collection's expected size)
    expected_chunks: int = Field(0, ge=0)  # the size a new collection's shards are made for when not named
    index_replicas: str = "0-1"       # replicas: a count, or a range kept to the nodes there are
    vectors: Literal["float", "lucene-sq", "byte"] = "float"  # how vectors are stored: exact, Lucene's int7, int8

    # ## Search
    reranker: str = "none"            # the default reranker (none, voyage, bedrock, cohere, onnx); a query may name another
    rerank_model: str = ""            # an API reranker's model ("": its default)
    rerank_onnx: str = ""             # the onnx reranker's file (a tokenizer.json beside it)
    cohere_url: str = "https://api.cohere.com"  # a Cohere-compatible POST /v2/rerank
    voyage_base_url: str = Field("", validation_alias=AliasChoices("VOYAGE_BASE_URL"))  # Voyage's endpoint (a stand-in, a proxy); "": Voyage's

    # ## Input limits
    # A document, a file or a request over these fails alone with the reason (the rest of its batch
    # goes on). Extraction runs in a child process of the worker with no credentials and hard
    # limits: generous for real reports (500+ pages); a file built to be slow to read fails within
    # seconds.
    max_document_bytes: int = 64_000_000  # a document (a file: its original bytes)
    max_chunks_per_document: int = 20_000  # chunks one document may make
    max_pages: int = 2000             # pages one file may have
    max_extracted_bytes: int = Field(20_000_000, validation_alias=AliasChoices(
        "SITUATE_MAX_EXTRACTED_BYTES", "SITUATE_MAX_EXTRACTED_CHARS"))  # the UTF-8 text one file may extract to
    extract_timeout_s: float = 300    # wall time of one file's extraction
    extract_memory_mb: int = 2048     # the extracting process's memory
    extract_cpu_s_per_page: float = 0.25  # CPU seconds a page read may add to the 10 any file gets
    max_request_bytes: int = 72_000_000  # an HTTP request body, chunked uploads included (413)
    max_batch_documents: int = 1000   # documents in one HTTP request
    max_labels: int = Field(5000, ge=1)  # labelled questions a collection keeps (the search page's, imported, generated)
    redis_memory_high_water: float = 0.85  # share of Redis's maxmemory at which producers are told to wait (503 + Retry-After)
    backlog_mb: int = 256             # documents submitted and not yet indexed or failed weigh this at most; past it producers wait (503 + Retry-After)

    # ## Delivery and faults
    # A worker that dies has its documents taken up by another within the recovery time; a live
    # worker's tasks are never taken from it, however long they run (its heartbeat keeps them).
    recovery_s: float = 60            # a dead worker's documents are taken up within this
    max_deliveries: int = 3           # a message whose process died this many times fails its document
    transient_patience_s: float = 900  # how long a transient fault (a store away, a provider failing) is waited out
    rate_limit_patience_s: float = Field(900, validation_alias=AliasChoices(
        "SITUATE_RATE_LIMIT_PATIENCE_S", "SITUATE_LLM_RATE_LIMIT_PATIENCE_S"))  # how long a provider's 429s are waited out
    provider_max_attempts: int = Field(0, ge=0, validation_alias=AliasChoices(
        "SITUATE_PROVIDER_MAX_ATTEMPTS", "SITUATE_LLM_MAX_ATTEMPTS"))  # tries of a failing call at most (0: the patience alone)
    provider_timeout_s: float = 120   # an embedder's, a reranker's or S3's answer, before it is a timeout (retried)
    task_time_limit_s: int = 3000     # hard limit of one task (prefork pools)
    stale_after_s: float = 3600       # a version already in flight is queued again only when it has not moved for this long
    reconcile_after_s: float = 180    # a document in flight that has not moved for this long, its work nowhere, is sent on again
    reconcile_every_s: float = 30     # a reconciler pass at most this often in the fleet (0: off)
    compact_idle_s: float = 60        # an index unwritten this long is merged into few segments, if it has many (0: never)

    # ## Workers
    queue_ahead: int = 8              # messages each queue holds ahead of its workers; the rest wait in one line per collection (fair shares)
    shards: int = 4                   # contextualize.N queues (workers only: the chunk task picks the shard)
    worker_process_mb: int = 400      # what ``situate worker`` plans per prefork process (0: no check)
    worker_thread_mb: int = 60        # and per thread of a threads pool
    liveness_file: str = ""           # a file the worker touches on each heartbeat; its liveness probe reads its age ("": none)
    embed_batch_size: int = 1         # texts per call into a local ONNX encoder
    embed_threads: int = 0            # ONNX / C threads per process (0: cores / pool processes in situate worker, 1 in situate api)
    model_files: str = ""             # where model files from Maven Central are unpacked ("": the installation's share/situate/models)
    models: str = ""                  # models of your own, or corrections to the model table, as JSON (workers/models.py)
    models_dir: str = ""              # the only folder GGUF files (the llama contextualizer) are read from

    # ## Bundles of small documents
    # One-chunk documents contextualized and indexed together: one task for a bundle's calls, made
    # concurrently; one task, one embedding request, one bulk write for its index
    # (``pipeline/bundling.py``). A bundle is cut at whichever bound comes first.
    bundle_max_documents: int = Field(32, ge=1)  # documents in one bundle at most (1: each document alone)
    bundle_max_bytes: int = Field(1_000_000, ge=1)  # their chunks' text weighs this at most (one document whatever it weighs)
    bundle_wait_s: float = Field(0.5, ge=0)  # a bundle not yet full leaves this long after its first document

    # ## Keeping and rebuilding
    keep_text: bool = True            # keep each indexed document's body, compressed, to rebuild from (situate reindex)
    keep_originals: bool = True       # keep an extracted file's original bytes, for the search page's page images
    keep_originals_mb: int = 512      # in Redis, within this for all collections (in S3: no limit of ours)
    reindex_window: int = 500         # a reindex's documents in flight at once
    reindex_pause_s: float = 60       # the longest a switch of generations holds new submissions
    reindex_keep_s: float = 7 * 24 * 3600  # how long the previous generation is kept for a rollback

    # ## LLM contextualizers
    llm_concurrency: int = 16         # calls in flight per worker process
    llm_document_concurrency: int = 16  # of which one document may take, when alone
    llm_timeout_s: float = 120        # one call; a slower answer is retried (and may be paid twice)
    llm_max_output_tokens: int = 200  # a context's length at most
    llm_max_context_chars: int = 1500  # what of a context is kept
    llm_max_document_tokens: int = 60_000  # over this, a document is situated as its opening and section windows
    llm_long_doc_opening_tokens: int = 3_000  # a long document's opening
    llm_long_doc_window_tokens: int = 12_000  # a long document's section window
    rate_limits: dict[str, dict[str, int]] = {}  # per model, {"rpm", "itpm", "otpm"}; unlisted models: workers/models.py's
    rate_limit_burst_s: float = 60.0  # a rate bucket's capacity, in seconds of its limit
    batch_poll_s: float = 30.0        # Message Batches: how often a running batch is polled
    batch_wait_s: float = 60.0        # the longest a document's step waits in the pool for a fuller batch
    batch_api_rpm: int = 50           # the account's Batches API requests per minute (creations, polls, results: the first tier's 50)
    batch_queue_limit: int = 100_000  # requests the account may have waiting in the Batches API's processing queue
    batch_max_requests: int = 100_000  # requests a batch holds at most (the API's limit)
    batch_max_bytes: int = 256_000_000  # a batch's size at most (the API's limit)
    llama_model: str = ""             # the llama contextualizer's default GGUF file (in SITUATE_MODELS_DIR)
    llama_n_ctx: int = 4096           # its window in tokens
    llama_threads: int = 0            # its threads (0: llama.cpp's default)
    llama_allow_amx: bool = False     # run a llama.cpp build with AMX (such builds crashed on document-sized prompts)

    # ## Your own LLM servers (the openai contextualizer)
    # Replicas of an OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama, TGI, a hosted API), set
    # on the workers. Each replica keeps its own prefix cache: a document's calls go to one of them.
    openai_base_urls: str = ""        # the replicas' base URLs, comma-separated, each ending in /v1
    openai_routing: Literal["affinity", "round-robin", "least-loaded"] = "affinity"  # a document's calls on one replica (affinity), or each call on the next replica, or on the least busy
    openai_replica_concurrency: int = Field(8, ge=1)  # calls in flight on one replica, all workers together (the rest wait their turn)
    openai_imbalance: int = Field(8, ge=0)  # when every replica's slots are full, a new document skips its replica if that one has this many calls in flight more than the least busy (with a slot free somewhere, it takes the first free)
    openai_down_s: float = 30         # a replica that refused a connection or timed out is left alone this long, then probed
    openai_wait_s: float = Field(10, gt=0)  # a call waits this long for a slot on its document's replica; then, if another replica has a free slot, the document moves there (its prefix computed again, once)
    openai_context_tokens: int = Field(8192, ge=1024)  # the served model's window per request; a longer document is read as its opening and windows
    openai_chars_per_token: float = Field(1.8, ge=0.5, le=8)  # characters a token the document budget assumes of your model's tokenizer (low enough for code; prose can take about 4): lower it if a server refuses a prompt over its window
    openai_prompt_cache_key: Literal["auto", "on", "off"] = "auto"  # send the document's key as prompt_cache_key (auto: to api.openai.com)

    # ## The API, its pages and Flower
    api_token: str = ""               # the admin token (scoped ones: situate token create); unset: open on loopback only
    api_host: str = "127.0.0.1"       # the address situate api binds (beyond loopback it needs a token)
    api_workers: int = Field(1, ge=1, le=64)  # processes serving the API (each embeds queries and fuses on a core of its own)
    dashboard_session_s: int = 8 * 3600  # how long a sign-in to the pages (search, dashboard) lasts
    flower_user: str = ""             # situate flower's basic auth (required beyond loopback)
    flower_password: str = ""         # and its password
    flower_oauth: str = Field("", validation_alias=AliasChoices("FLOWER_AUTH"))  # Flower's own OAuth (FLOWER_OAUTH2_* passed through)

    # ## What callers may choose
    # "name" or "name:model", comma-separated, "*" for anything: the paid models beyond the default
    # are the operator's choice, not a caller's; SITUATE_EMBEDDER and SITUATE_RERANKER always are.
    allowed_models: str = "none,structural,keywords,llama,anthropic:claude-haiku-5-5,bedrock:claude-haiku-5-5"  # contextualizers
    allowed_embedders: str = "local-e5,local-bge,local,local-multilingual"  # embedders a collection may use
    allowed_rerankers: str = "none,onnx"  # rerankers a query may name

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

    anthropic_api_key: str = ""       # the Anthropic API (workers only; ANTHROPIC_BASE_URL for a proxy)
    anthropic_auth_token: str = ""    # or a bearer token for it
    voyage_api_key: str = ""          # Voyage's embedders and reranker
    cohere_api_key: str = Field("", validation_alias=AliasChoices("CO_API_KEY", "COHERE_API_KEY"))  # the cohere reranker
    aws_access_key_id: str = ""       # Bedrock, S3 and SigV4 for OpenSearch: boto3's credential chain
    aws_secret_access_key: str = ""   # (the same chain)
    aws_session_token: str = ""       # (the same chain)
    aws_profile: str = ""             # (the same chain)
    aws_endpoint_url_bedrock_runtime: str = ""  # Bedrock's endpoint (a stand-in, a VPC endpoint)
    openai_api_key: str = ""          # the openai contextualizer's servers, when they ask for a key (self-hosted ones often do not)
    situate_api_token: str = ""       # the API's admin token (also a setting, above)
    situate_flower_password: str = ""  # situate flower's password (also a setting, above)
    situate_redis_sentinel_password: str = ""  # the sentinels' password (also a setting, above)

    def secrets(self) -> list[str]:
        """Values to remove from every log line (long enough not to blank out ordinary words)."""
        kept = ("anthropic_api_key", "anthropic_auth_token", "voyage_api_key", "cohere_api_key", "openai_api_key",
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
