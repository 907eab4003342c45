"""Running situate here: set-up and services (the shell scripts ``setup``, ``up``, ``down``,
``demo``, ``test``, ``bench``), and the Python they use — ``harness`` (real processes for tests
and benchmarks: Redis servers, OpenSearch nodes, workers, the API), ``standin*`` (the paid
APIs' stand-in, ``python -m ops.standin``), ``faultproxy`` (connections cut on purpose) and the
benchmarks (``bench``, ``python -m ops.bench``, and a ``bench_*`` module each). A package, run
from the repository: no ``sys.path`` is changed anywhere.
"""
