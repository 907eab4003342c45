"""Which format a file is: by its content first, its name second, a declared media type third.

A name can lie (``report.txt`` that is a PDF) and content cannot be read without knowing what it
is, so the signatures that cannot be mistaken come first: ``%PDF-``, an OOXML zip, an old binary
Office file, images and archives. Then HTML by its opening tags or its name, CSV by its name or a
declared ``text/csv``; anything else is text (or code), read as before. A handful of checks on the
first bytes: a library for it would not say more.

This runs where files arrive (the API, the CLI), so it reads a bounded prefix only, never a
zip's central directory (a directory of a million entries costs seconds and hundreds of MB to
parse): an OOXML file is told by the names of its first parts, or its content types, in its first
``SNIFF_BYTES``. Which of Word, PowerPoint or Excel it really is, and whether it is a zip at all,
the extractor says from its parts, in the sandbox (``office.open_zip``).
"""

from __future__ import annotations

import re
import struct
import zlib
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


def media_type(data: bytes | bytearray, name: str = "", declared: str | None = None) -> str:
    """The media type to read ``data`` as; ``Unsupported`` for formats no extractor reads."""
    head = data[:4096]
    if b"%PDF-" in head[:1024]:
        return pdf.MEDIA_TYPE
    if head.startswith(b"PK\x03\x04"):
        return _ooxml(data, name)
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


SNIFF_BYTES = 1 << 18
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # a zip's local file header
_PREFIXES = {"word/": office.DOCX, "ppt/": office.PPTX, "xl/": office.XLSX}
_CONTENT_TYPES = {b"wordprocessingml.document.main": office.DOCX, b"presentationml.presentation.main": office.PPTX,
                  b"spreadsheetml.sheet.main": office.XLSX}
_OFFICE_SUFFIX = re.compile(r"\.(docx|pptx|xlsx)$", re.I)


def _ooxml(data: bytes | bytearray, name: str) -> str:
    """Which Office format a zip is, from the local headers (and the content types) in its first
    ``SNIFF_BYTES``; by its name when those say nothing; else not a document."""
    head, at = bytes(data[:SNIFF_BYTES]), 0
    while at + _LOCAL.size <= len(head) and head[at:at + 4] == b"PK\x03\x04":
        _, _, flags, method, _, _, _, size, _, name_len, extra_len = _LOCAL.unpack_from(head, at)
        part = head[at + _LOCAL.size:at + _LOCAL.size + name_len].decode("utf-8", "replace")
        body = at + _LOCAL.size + name_len + extra_len
        kind = next((k for prefix, k in _PREFIXES.items() if part.startswith(prefix)), None)
        if kind is None and part == "[Content_Types].xml":
            kind = _kind_from_content_types(head[body:body + size] if size else head[body:], method)
        if kind is not None:
            return kind
        if flags & 0x08 or not size:  # sizes after the data: the next header cannot be found from here
            break
        at = body + size
    suffix = _OFFICE_SUFFIX.search(name)
    if suffix:
        return SUFFIXES["." + suffix.group(1).lower()]
    raise Unsupported("a zip archive, not a document (unpack it and ingest the folder)")


def _kind_from_content_types(stored: bytes, method: int) -> str | None:
    """The main part's content type in ``[Content_Types].xml`` (its first 64 KB, inflated)."""
    try:
        text = zlib.decompressobj(-15).decompress(stored, 1 << 16) if method == 8 else stored[:1 << 16]
    except zlib.error:
        return None
    return next((kind for marker, kind in _CONTENT_TYPES.items() if marker in text), None)
