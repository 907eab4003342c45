"""The chunk stage's parts, below storage: a document body in, its chunks out.

- ``splitting``: ``Chunk``, the token-aware splitter (Markdown, and code by tree-sitter), language
  guesses, locating given chunks in their text;
- ``layout``: an extracted file (pages, sections, tables) cut along its layout;
- ``sections``: where a chunk sits — Markdown heading paths, code's enclosing definitions, a title;
- ``recipe``: ``chunks_of``, the one recipe the chunk task, rebuilds and estimates call.
"""
