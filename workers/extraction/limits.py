"""The bounds one document's extraction runs under, so that a hostile or broken file fails
alone, with a reason, and the worker lives on. Defaults are generous for real documents (an
annual report runs past 500 pages; 2,000 are allowed).

Budgets are in the units that cost: text in UTF-8 bytes (what the reply, the body store and the
checkpoints hold: a workbook of one 40 KB emoji string referenced 2,000 times is 80 MB, not
"20 M characters"), and time in CPU seconds *per page* as well as wall seconds per file. A real
filing's pages cost milliseconds each to read; a page drawing nested form objects can cost a
second, and 2,000 of them in a 340 KB file would hold an extraction slot for minutes. So the CPU
a file may use grows with the pages read so far (``cpu_base_s + cpu_per_page_s`` x pages): a
pathological file fails after a few pages, a long honest one never notices.
"""

from __future__ import annotations

import resource
import time
from dataclasses import asdict, dataclass
from typing import Any

from workers.errors import ExtractionError
from workers.settings import get_settings


@dataclass(frozen=True)
class Limits:
    max_pages: int = 2000
    max_bytes: int = 20_000_000      # extracted text, UTF-8
    timeout_s: float = 300.0         # wall time, the whole extraction
    memory_mb: int = 2048            # the extracting process's address space
    cpu_base_s: float = 10.0         # CPU seconds any file may use, plus ...
    cpu_per_page_s: float = 0.25     # ... these per page read so far
    max_unzipped_bytes: int = 500_000_000  # Office files are zips: what they may expand to
    max_zip_ratio: int = 200         # and by how much one member may
    max_zip_entries: int = 10_000    # and how many parts they may have (read before the directory)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_settings(cls) -> Limits:
        """The deployment's limits (``SITUATE_MAX_PAGES``, ``SITUATE_MAX_EXTRACTED_BYTES``,
        ``SITUATE_EXTRACT_TIMEOUT_S``, ``SITUATE_EXTRACT_MEMORY_MB``,
        ``SITUATE_EXTRACT_CPU_S_PER_PAGE``): a worker's, and an estimate's, which extracts as a
        worker would."""
        s = get_settings()
        return cls(max_pages=s.max_pages, max_bytes=s.max_extracted_bytes, timeout_s=s.extract_timeout_s,
                   memory_mb=s.extract_memory_mb, cpu_per_page_s=s.extract_cpu_s_per_page)

    def reply_bytes(self) -> int:
        """The most an extraction's answer may take: the text, and its headings and offsets (each
        a piece of the text or a number), with room for JSON's own characters."""
        return 3 * self.max_bytes + (1 << 20)


class Budget:
    """Checked as an extractor goes: bytes of text so far, pages read against CPU spent, the clock."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.deadline = time.monotonic() + limits.timeout_s
        self.cpu_start = time.process_time()
        self.bytes = 0
        self.pages = 0

    def spend(self, text: str) -> None:
        self.bytes += len(text.encode("utf-8", "replace"))
        if self.bytes > self.limits.max_bytes:
            raise ExtractionError(f"its text is over {self.limits.max_bytes:,} bytes (SITUATE_MAX_EXTRACTED_BYTES)")
        if time.monotonic() > self.deadline:
            raise ExtractionError(f"extraction took over {self.limits.timeout_s:.0f} s (SITUATE_EXTRACT_TIMEOUT_S)")

    def allowed_cpu_s(self, pages: int) -> float:
        return self.limits.cpu_base_s + self.limits.cpu_per_page_s * pages

    def expect_pages(self, total: int) -> None:
        """The file has ``total`` pages: where the process runs under a hard CPU limit (the
        sandbox's child), its soft limit becomes what they may cost at most, so that a single
        page that never ends is stopped by the kernel (SIGXCPU) rather than by the wall clock."""
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        if hard == resource.RLIM_INFINITY:
            return
        allowed = int(time.process_time() + self.allowed_cpu_s(total)) + 2
        resource.setrlimit(resource.RLIMIT_CPU, (min(hard, max(allowed, 1)), hard))

    def page(self) -> None:
        """One more page read: its CPU so far must fit what that many pages may cost."""
        self.pages += 1
        used = time.process_time() - self.cpu_start
        if used > self.allowed_cpu_s(self.pages):
            raise ExtractionError(
                f"its first {self.pages:,} pages took {used:.0f} s of CPU, over the "
                f"{self.limits.cpu_base_s:.0f} s + {self.limits.cpu_per_page_s:g} s a page allowed "
                "(SITUATE_EXTRACT_CPU_S_PER_PAGE): pages built to be slow to read?")
        if time.monotonic() > self.deadline:
            raise ExtractionError(f"extraction took over {self.limits.timeout_s:.0f} s (SITUATE_EXTRACT_TIMEOUT_S)")
