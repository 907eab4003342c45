"""The front of situate: what users run, and the read path.

- ``cli/`` the ``situate`` command (``main`` lists every command), ``api`` the HTTP API,
  ``client`` a Python client for it;
- ``submit`` validation and enqueueing, shared by the CLI and the API; ``loaders`` files,
  folders, JSONL and the cookbook's JSON into documents;
- ``retrieval/`` hybrid search, fusion and rerankers; ``evaluate`` metrics and reports.

Producers validate documents, store their bodies once, and enqueue a reference by task name;
they never chunk, call an LLM or embed documents (the read path embeds queries). They use the
workers' storage and embedding layers, never the pipeline's tasks.
"""
