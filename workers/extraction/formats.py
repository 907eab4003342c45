"""The extractor of each media type: one table, read by the sandbox child."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from workers.errors import ExtractionError
from workers.extraction import office, pdf, tables, web
from workers.extraction.document import Extracted
from workers.extraction.limits import Limits

EXTRACTORS: dict[str, Callable[[Path, Limits, str], Extracted]] = {
    pdf.MEDIA_TYPE: pdf.extract,
    web.MEDIA_TYPE: web.extract,
    tables.MEDIA_TYPE: tables.extract,
    office.DOCX: office.extract_docx,
    office.PPTX: office.extract_pptx,
    office.XLSX: office.extract_xlsx,
}


def extract(path: Path, media_type: str, limits: Limits, name: str = "") -> Extracted:
    extractor = EXTRACTORS.get(media_type)
    if extractor is None:
        raise ExtractionError(f"no extractor for {media_type}")
    return extractor(path, limits, name)
