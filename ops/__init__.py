"""Running situate here. The shell entry points sit at the top — ``setup``, ``up``, ``down``,
``demo``, ``test``, ``bench`` (and ``lib.sh``, which they source) — with the Python they share:
``harness`` (real processes for tests and benchmarks: Redis servers, OpenSearch nodes, workers,
the API, the stand-ins), ``model_servers`` (a fleet of stand-in replicas, llama.cpp's own server)
and ``docs`` (the generated reference pages). The rest is in rooms:

- ``benchmarks/``: the runner (``ops/bench NAME``, ``python -m ops.benchmarks``), the recorder
  (``record``: ``--record`` writes a run into docs/benchmarks.md) and one module per benchmark;
- ``standins/``: the remote model APIs' stand-ins — Claude behind Anthropic and Bedrock
  (``claude``), Message Batches, Voyage/Bedrock/Cohere vectors, and a fleet of OpenAI-compatible
  replicas (``openai_fleet``);
- ``fleet/``: hosts in network namespaces, the links between them, the fault proxy;
- ``opensearch/``: OpenSearch assembled from Maven Central.

A package, run from the repository: no ``sys.path`` is changed anywhere.
"""
