"""Contextualizers: a context for each chunk of a document, written by reading the whole of it.

``base`` (the interface), ``registry`` (by name), ``offline`` (``none``, ``structural``,
``keywords``: no model) with ``structure`` and ``keywords``, ``prompts`` (the one prompt),
``llama`` (a local GGUF model) with ``gguf`` (packaged ones), and ``llm/`` (language models behind
an API: Claude's, and servers of your own).
"""
