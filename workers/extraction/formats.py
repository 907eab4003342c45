"""The extractor of each media type: one table, read by the sandbox's child.

``preload`` imports every parser, and the standard library's modules they load lazily, before
the child gives up its user and its file access (``child.harden``): afterwards it may not be able
to read them.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

from workers.errors import ExtractionError
from workers.extraction import office, pdf, tables, web
from workers.extraction.document import Extracted
from workers.extraction.limits import Limits

EXTRACTORS: dict[str, Callable[[bytes, Limits, str], Extracted]] = {
    pdf.MEDIA_TYPE: pdf.extract,
    web.MEDIA_TYPE: web.extract,
    tables.MEDIA_TYPE: tables.extract,
    office.DOCX: office.extract_office,
    office.PPTX: office.extract_office,
    office.XLSX: office.extract_office,
}

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder ``workers`` is in

# The parsers, and what they import only when a file needs it (a date in a web page, a codec).
PRELOAD = ["pypdfium2", "openpyxl", "docx", "docx.table", "docx.text.paragraph", "pptx", "pptx.enum.shapes",
           "trafilatura", "lxml.etree", "lxml.html", "defusedxml", "defusedxml.ElementTree", "csv", "zipfile",
           "_strptime", "unicodedata", "zlib", "bz2", "lzma", "PIL.Image", "PIL.ImageDraw", "PIL.PngImagePlugin"]


def preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    import encodings

    for module in pkgutil.iter_modules(encodings.__path__):  # any codec a file may declare
        try:
            importlib.import_module(f"encodings.{module.name}")
        except ImportError:  # a platform's codec (mbcs on Windows)
            pass


def extract(data: bytes, media_type: str, limits: Limits, name: str = "") -> Extracted:
    extractor = EXTRACTORS.get(media_type)
    if extractor is None:
        raise ExtractionError(f"no extractor for {media_type}")
    return extractor(data, limits, name)
