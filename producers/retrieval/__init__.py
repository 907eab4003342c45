"""The read path: ``search`` (BM25 + k-NN in one round trip), ``fusion`` (RRF or weighted
scores), ``rerankers`` (API or local cross-encoders). It never imports Celery: the API, the CLI,
evaluation and the benchmarks call it in-process."""
