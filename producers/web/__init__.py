"""The HTTP surface: ``api`` (the FastAPI app and its routes), ``auth`` (tokens and scopes),
``http_guard`` (framing, size limits, who may call with no credential set), ``signin`` and
``dashboard`` (the operator's page), ``search_page`` (ask, see the cited page),
``reindex_routes``, ``prometheus`` (``/metrics``), ``fleet`` (the pipeline's state, read by the
dashboard, ``/metrics`` and ``situate status``), ``mcp_server`` (tools for agents). ``assets/``
holds the pages' templates and scripts.
"""
