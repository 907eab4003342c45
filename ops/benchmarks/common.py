"""What the benchmarks share: where the corpora are, and the environment they run in."""

from __future__ import annotations

import os
from pathlib import Path

from ops.harness import ROOT

CORPUS = Path(os.environ.get("SITUATE_DEMO_CORPUS", ROOT.parent / "shared" / "data" / "cookbook"))
DATA = CORPUS.parent


def fast_standin_env(url: str, model: str) -> dict[str, str]:
    """A run against the stand-in (``url``) for Claude and Voyage, rate limits out of the way."""
    import json

    return {"ANTHROPIC_API_KEY": "sk-ant-bench", "ANTHROPIC_BASE_URL": url,
            "VOYAGE_API_KEY": "pa-bench", "VOYAGE_BASE_URL": f"{url}/v1",
            "SITUATE_RATE_LIMITS": json.dumps({model: {"rpm": 10**7, "itpm": 10**10, "otpm": 10**9}})}


def bill_of(collection: str) -> dict:
    """The collection's LLM bill, as ``situate stats`` prints it (its ``total``)."""
    import json
    import subprocess

    from ops.harness import SITUATE

    out = subprocess.run([SITUATE, "stats", "-c", collection, "--json"], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout)["collections"][collection]["total"])
