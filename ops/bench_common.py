"""What the benchmarks share: where the corpora are, and the environment they run in."""

from __future__ import annotations

import os
from pathlib import Path

from ops.harness import ROOT

CORPUS = Path(os.environ.get("SITUATE_DEMO_CORPUS", ROOT.parent / "shared" / "data" / "cookbook"))
DATA = CORPUS.parent
