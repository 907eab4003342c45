"""situate's pipeline, and the layers it stands on. From the bottom up:

- ``settings`` (environment), ``connections`` (Redis, OpenSearch), ``models`` (the model table:
  prices, cache minimums, limits), ``documents`` (validation, versions, ids), ``chunking``;
- ``storage/``: ``catalog`` (collections' frozen settings), ``states`` (per-document state),
  ``bodies``, ``checkpoints`` (chunks, paid contexts), ``chunk_index`` (OpenSearch mapping, writes);
- ``embedding/``: local models shipped in packages, Voyage and Bedrock;
- ``contextualizers/``: offline ones, a local GGUF model, and ``claude/`` (Anthropic API and
  Bedrock: scheduling, rate limit, the bill, batches);
- ``lifecycle``: creating (checking settings against every provider) and dropping collections;
- ``pipeline/``: the Celery app, routing (queues, shards, priority) and the stage tasks.

Nothing imports upward: ``tests/unit/test_layout.py`` fails on an import cycle.
"""
