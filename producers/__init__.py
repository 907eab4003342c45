"""situate's producers: the ``situate`` CLI, the HTTP API and the Python client.

Producers validate documents, store their bodies once, and enqueue a reference; they never
chunk, call an LLM or embed documents (the API embeds queries, to search).
"""
