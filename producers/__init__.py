"""The front of situate: what users run, and the read path.

- ``cli/`` the ``situate`` command (``main`` lists every command); ``web/`` the HTTP API, the
  search page, the dashboard and the MCP server; ``client`` a Python client for the API;
  ``public/`` what users import, installed as ``situate``;
- ``ingest/`` loaders (files, folders, JSONL, S3), submitting and waiting, estimates;
- ``retrieval/`` hybrid search, fusion and rerankers; ``evaluation/`` metrics, suites, tuning;
  ``integrations/`` LangChain and LlamaIndex retrievers.

Producers store documents' bodies once and enqueue a reference by task name; they never chunk,
call an LLM or embed documents (the read path embeds queries). They use the workers' storage
and embedding layers, never the pipeline's tasks.
"""
