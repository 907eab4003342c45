"""The benchmarks: ``__main__`` is the runner (``ops/bench NAME``), ``record`` writes a run into
docs/benchmarks.md, ``common`` holds what several share, and each other module is one benchmark."""
