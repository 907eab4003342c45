"""situate's pipeline, and the layers it stands on. From the bottom up:

- ``settings`` (environment), ``errors``, ``keys`` (every Redis key), ``connections`` (Redis,
  OpenSearch), ``logs``, ``models`` (the model table: prices, cache minimums, limits), ``allowlist``,
  ``faults`` (transient or permanent: one classification of provider faults), ``metrics``;
- ``documents/`` (validation, versions, ids), ``chunks/`` (the chunk stage's recipe: splitting,
  layout, sections), ``extraction/`` (files in a sandbox), ``embedding/``;
- ``storage/``: ``catalog`` (collections' frozen settings), ``states`` (per-document state),
  ``bodies``, ``checkpoints`` (chunks, paid contexts), ``chunk_index`` (OpenSearch mapping, writes);
- ``contextualizers/``: offline ones, a local GGUF model, and ``llm/`` (Claude through the Anthropic
  API and Bedrock, servers of your own through the OpenAI protocol: scheduling, replicas, rate
  limit, the bill, batches); ``lifecycle`` (creating, checking settings
  against every provider, and dropping collections);
- ``pipeline/``: the Celery app, routing (queues, shards, priority) and the stage tasks.

Nothing imports upward: ``tests/unit/test_layout.py`` fails on an import cycle or an upward import.
"""
