"""The bounds one document's extraction runs under, so that a hostile or broken file fails
alone, with a reason, and the worker lives on. Defaults are generous for real documents (an
annual report runs past 500 pages; 2,000 are allowed, and minutes on 2 cores)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from workers.errors import ExtractionError
from workers.settings import get_settings


@dataclass
class Limits:
    max_pages: int = 2000
    max_chars: int = 20_000_000      # extracted text
    timeout_s: float = 300.0         # wall time, the whole extraction
    memory_mb: int = 2048            # the extracting process's address space
    max_unzipped_bytes: int = 500_000_000  # Office files are zips: what they may expand to
    max_zip_ratio: int = 200         # and by how much one member may

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_settings(cls) -> Limits:
        """The deployment's limits (``SITUATE_MAX_PAGES``, ``SITUATE_MAX_EXTRACTED_CHARS``,
        ``SITUATE_EXTRACT_TIMEOUT_S``, ``SITUATE_EXTRACT_MEMORY_MB``): a worker's, and an
        estimate's, which extracts as a worker would."""
        s = get_settings()
        return cls(max_pages=s.max_pages, max_chars=s.max_extracted_chars, timeout_s=s.extract_timeout_s,
                   memory_mb=s.extract_memory_mb)


class Budget:
    """Checked as an extractor goes: characters so far, the clock."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.deadline = time.monotonic() + limits.timeout_s
        self.chars = 0

    def spend(self, chars: int) -> None:
        self.chars += chars
        if self.chars > self.limits.max_chars:
            raise ExtractionError(f"more than {self.limits.max_chars:,} characters of text "
                                  "(SITUATE_MAX_EXTRACTED_CHARS)")
        if time.monotonic() > self.deadline:
            raise ExtractionError(f"extraction took over {self.limits.timeout_s:.0f} s (SITUATE_EXTRACT_TIMEOUT_S)")
