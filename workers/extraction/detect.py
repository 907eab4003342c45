"""Which format a file is: by its content first, its name second, a declared media type third.

A name can lie (``report.txt`` that is a PDF) and content cannot be read without knowing what it
is, so the signatures that cannot be mistaken come first: ``%PDF-``, an OOXML zip (by the parts
inside it), an old binary Office file, images and archives. Then HTML by its opening tags or its
name, CSV by its name or a declared ``text/csv``; anything else is text (or code), read as
before. A handful of checks on the first bytes: a library for it would not say more.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import PurePosixPath

from workers.errors import Unsupported
from workers.extraction import office, pdf, tables, web

TEXT = "text/plain"
EXTRACTED = (pdf.MEDIA_TYPE, web.MEDIA_TYPE, tables.MEDIA_TYPE, office.DOCX, office.PPTX, office.XLSX)
SUFFIXES = {".pdf": pdf.MEDIA_TYPE, ".html": web.MEDIA_TYPE, ".htm": web.MEDIA_TYPE, ".xhtml": web.MEDIA_TYPE,
            ".csv": tables.MEDIA_TYPE, ".tsv": tables.MEDIA_TYPE, ".docx": office.DOCX, ".pptx": office.PPTX,
            ".xlsx": office.XLSX}
LABELS = {pdf.MEDIA_TYPE: "PDF", web.MEDIA_TYPE: "HTML", tables.MEDIA_TYPE: "CSV", office.DOCX: "DOCX",
          office.PPTX: "PPTX", office.XLSX: "XLSX"}
DECLARED = {"application/xhtml+xml": web.MEDIA_TYPE, "text/tab-separated-values": tables.MEDIA_TYPE,
            **{t: t for t in EXTRACTED}}


_NOT_DOCUMENTS = [(b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"GIF8", "a GIF image"),
                  (b"\x1f\x8b", "a gzip archive"), (b"7z\xbc\xaf", "a 7-Zip archive"), (b"Rar!", "a RAR archive"),
                  (b"\x7fELF", "an executable")]


def media_type(data: bytes, name: str = "", declared: str | None = None) -> str:
    """The media type to read ``data`` as; ``Unsupported`` for formats no extractor reads."""
    head = data[:4096]
    if b"%PDF-" in head[:1024]:
        return pdf.MEDIA_TYPE
    if head.startswith(b"PK\x03\x04"):
        return _ooxml(data)
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        raise Unsupported("a legacy binary Office file (.doc, .xls, .ppt): save it as .docx, .xlsx or .pptx")
    for magic, what in _NOT_DOCUMENTS:
        if head.startswith(magic):
            raise Unsupported(f"{what}, not a document")
    suffix = PurePosixPath(name).suffix.lower()
    opening = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if opening.startswith((b"<!doctype html", b"<html")) or (opening.startswith(b"<?xml") and b"<html" in opening):
        return web.MEDIA_TYPE
    if suffix in SUFFIXES and SUFFIXES[suffix] in (web.MEDIA_TYPE, tables.MEDIA_TYPE):
        return SUFFIXES[suffix]
    declared_type = DECLARED.get((declared or "").split(";", 1)[0].strip().lower())
    if declared_type in (web.MEDIA_TYPE, tables.MEDIA_TYPE):
        return declared_type
    if suffix in SUFFIXES:  # a .pdf or .docx without its signature: broken, say so rather than read it as text
        raise Unsupported(f"named {suffix} but its content is not one (truncated or not what its name says)")
    return TEXT


def _ooxml(data: bytes) -> str:
    try:
        names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    except zipfile.BadZipFile:
        raise Unsupported("a broken zip archive") from None
    if "word/document.xml" in names:
        return office.DOCX
    if "ppt/presentation.xml" in names:
        return office.PPTX
    if "xl/workbook.xml" in names:
        return office.XLSX
    raise Unsupported("a zip archive, not a document (unpack it and ingest the folder)")
