"""What a worker's memory is made of, planned before it starts and held once it runs."""

from __future__ import annotations

import subprocess
import sys

from producers.cli.processes import memory_refusal

PROBE = """
import os
from workers.embedding import registry
embedder = registry.get("local")
text = " ".join(f"word{i} token{i}" for i in range(200))
embedder.embed_documents([text] * 32)
print(next(int(l.split()[1]) // 1024 for l in open(f"/proc/{os.getpid()}/status") if l.startswith("VmRSS")))
"""


def test_a_pool_that_cannot_fit_is_refused_with_the_remedy():
    assert memory_refusal("prefork", 4, available_mb=24_000) is None
    refused = memory_refusal("prefork", 64, available_mb=24_000)
    assert refused and "--concurrency 59" in refused and "--pool threads" in refused
    assert memory_refusal("threads", 64, available_mb=24_000) is None, "threads share the process's models"
    assert memory_refusal("threads", 500, available_mb=24_000)


def test_an_embedding_process_stays_near_its_planned_size():
    """Long batches grew a process to 1.5 GB with ONNX Runtime's memory arena; without it, 0.3.
    One batch of 32 long texts tells them apart (measured: 883 MB with the arena, 252 without)."""
    rss_mb = int(subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                                timeout=300).stdout.strip())
    assert rss_mb < 600, f"{rss_mb} MB after a batch of 32 long texts"
