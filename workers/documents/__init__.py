"""Documents as they enter the pipeline, below storage (which names chunks by them).

- ``validation``: a producer's ``RawDocument`` made valid (``valid``): text or an original to
  extract, pre-made chunks, metadata; every check and its reason;
- ``identity``: versions (hashes of the content) and chunk ids.
"""
