"""Word, PowerPoint and Excel files (OOXML: zips of XML), with python-docx, python-pptx and
openpyxl (MIT): headings, paragraphs, lists and tables as Markdown; a presentation's slides as
pages; a workbook's sheets as sections.

Which of the three a file is, is read here from its parts (the API only sniffed its first bytes:
a zip's directory is read where hostile files are). Before any library opens one, ``check_zip``
reads the count of entries from the zip's end record (a directory of a million entries is
refused before it is parsed), then the directory: a member that expands past ``max_zip_ratio``
times its size or a total past ``max_unzipped_bytes`` (a zip bomb), or an XML part that declares
a DTD or entities anywhere in it ("billion laughs"; OOXML never needs one), fails the file with
that reason. The parsers themselves expand no entity either (``child.harden_xml``): the scan
gives the reason, not the safety.
"""

from __future__ import annotations

import io
import struct
import zipfile
from typing import Any

from workers.errors import ExtractionError
from workers.extraction import cover
from workers.extraction.document import Extracted
from workers.extraction.limits import Budget, Limits
from workers.extraction.markdown import Writer, table

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


KINDS = {"word/document.xml": DOCX, "ppt/presentation.xml": PPTX, "xl/workbook.xml": XLSX}
_END = b"PK\x05\x06"
_END64_LOCATOR = b"PK\x06\x07"
_MARKUP = (b"<!DOCTYPE", b"<!ENTITY")


def entry_count(data: bytes) -> int:
    """How many entries the zip's end record declares, without reading its directory."""
    tail = data[-(65_536 + 22):]
    at = tail.rfind(_END)
    if at < 0 or len(tail) < at + 22:
        raise ExtractionError("not a readable Office file (no zip end record)")
    count: int = struct.unpack("<H", tail[at + 10:at + 12])[0]
    locator = tail.rfind(_END64_LOCATOR, 0, at)
    if count == 0xFFFF and locator >= 0:  # zip64: the count is in the zip64 end record
        (offset,) = struct.unpack("<Q", tail[locator + 8:locator + 16])
        record = data[offset:offset + 56]
        if record[:4] == b"PK\x06\x06" and len(record) >= 40:
            count = struct.unpack("<Q", record[32:40])[0]
    return count


def _declares_markup(part: io.BufferedIOBase) -> bool:
    """A DTD or an entity declaration anywhere in the part (read in pieces, their seams kept)."""
    carry = b""
    while chunk := part.read(1 << 20):
        window = (carry + chunk).upper()
        if any(m in window for m in _MARKUP):
            return True
        carry = window[-16:]
    return False


def check_zip(z: zipfile.ZipFile, limits: Limits) -> None:
    members = z.infolist()
    total = sum(m.file_size for m in members)
    if total > limits.max_unzipped_bytes:
        raise ExtractionError(f"expands to {total:,} bytes, over {limits.max_unzipped_bytes:,}: a zip bomb?")
    for m in members:
        if m.file_size > 1_000_000 and m.file_size > limits.max_zip_ratio * max(1, m.compress_size):
            raise ExtractionError(f"{m.filename} expands {m.file_size // max(1, m.compress_size):,} times: a zip bomb?")
        if m.filename.endswith((".xml", ".rels")):
            with z.open(m) as part:
                if _declares_markup(part):  # type: ignore[arg-type]  # ZipExtFile reads as a stream
                    raise ExtractionError(f"{m.filename} declares a DTD or XML entities, which Office files never "
                                          "need (an entity-expansion attack?)")


def open_zip(data: bytes, limits: Limits) -> tuple[zipfile.ZipFile, str]:
    """The file as a checked zip, and which Office format its parts say it is."""
    entries = entry_count(data)
    if entries > limits.max_zip_entries:
        raise ExtractionError(f"a zip of {entries:,} entries, over the {limits.max_zip_entries:,} an Office file "
                              "may have")
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        names = set(z.namelist())
        check_zip(z, limits)
    except zipfile.BadZipFile as e:
        raise ExtractionError(f"not a readable Office file (broken zip: {e})") from None
    kind = next((kind for part, kind in KINDS.items() if part in names), None)
    if kind is None:
        raise ExtractionError("a zip archive, not a Word, PowerPoint or Excel file")
    return z, kind


def extract_office(data: bytes, limits: Limits, name: str = "") -> Extracted:
    z, kind = open_zip(data, limits)
    z.close()
    reader = {DOCX: extract_docx, PPTX: extract_pptx, XLSX: extract_xlsx}[kind]
    return reader(io.BytesIO(data), limits, name)


def _properties(core: Any) -> dict[str, str]:
    """Core properties (python-docx and python-pptx say ``author``, openpyxl ``creator``)."""
    created, modified = getattr(core, "created", None), getattr(core, "modified", None)
    fields = {"title": getattr(core, "title", None), "author": getattr(core, "author", None) or getattr(core, "creator", None),
              "subject": getattr(core, "subject", None), "created": created.isoformat() if created else None,
              "modified": modified.isoformat() if modified else None}
    return {k: str(v) for k, v in fields.items() if v}


def _done(writer: Writer, media_type: str, properties: dict[str, str], name: str, **fields: Any) -> Extracted:
    text = "".join(writer.parts)
    if not text.strip():
        raise ExtractionError("no text in the file")
    return writer.done(media_type, title=cover.meaningful_title(properties.get("title", ""), name),
                       properties=properties, profile=cover.of(text[:20_000], properties, name), **fields)


def extract_docx(file: io.BytesIO, limits: Limits, name: str = "") -> Extracted:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    budget, writer = Budget(limits), Writer()
    document = docx.Document(file)
    for element in document.element.body.iterchildren():
        tag = element.tag.rsplit("}", 1)[-1]
        if tag == "p":
            paragraph = Paragraph(element, document)
            text = paragraph.text.strip()
            style = (paragraph.style.name if paragraph.style is not None else "") or ""
            if not text:
                continue
            budget.spend(text)
            if style == "Title":
                writer.heading(1, text)
            elif style.startswith("Heading") and style[7:].strip().isdigit():
                writer.heading(int(style[7:].strip()), text)
            elif style.startswith("List"):
                writer.block(f"- {text}")
            else:
                writer.block(text)
        elif tag == "tbl":
            rows = [[c.text for c in row.cells] for row in Table(element, document).rows]
            rendered = table(rows)
            budget.spend(rendered)
            writer.block(rendered)
    return _done(writer, DOCX, _properties(document.core_properties), name)


def extract_pptx(file: io.BytesIO, limits: Limits, name: str = "") -> Extracted:
    import pptx
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    budget, writer = Budget(limits), Writer()
    presentation = pptx.Presentation(file)
    slides = list(presentation.slides)
    if len(slides) > limits.max_pages:
        raise ExtractionError(f"{len(slides):,} slides, over the limit of {limits.max_pages:,} (SITUATE_MAX_PAGES)")
    budget.expect_pages(len(slides))
    for number, slide in enumerate(slides, start=1):
        budget.page()
        writer.page()
        title_shape = slide.shapes.title
        title = title_shape.text.strip() if title_shape is not None and title_shape.has_text_frame else ""
        writer.heading(1, title or f"Slide {number}")
        shapes = [s for s in slide.shapes if s is not title_shape]
        while shapes:
            shape = shapes.pop(0)
            if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
                shapes[:0] = list(shape.shapes)
            elif getattr(shape, "has_table", False) and shape.has_table:
                rendered = table([[c.text for c in row.cells] for row in shape.table.rows])
                budget.spend(rendered)
                writer.block(rendered)
            elif shape.has_text_frame:
                lines = ["  " * p.level + ("- " if p.level else "") + "".join(r.text for r in p.runs).strip()
                         for p in shape.text_frame.paragraphs]
                text = "\n".join(line for line in lines if line.strip())
                budget.spend(text)
                writer.block(text)
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                budget.spend(notes)
                writer.block(f"Notes: {notes}")
    return _done(writer, PPTX, _properties(presentation.core_properties), name, pages_total=len(slides))


def extract_xlsx(file: io.BytesIO, limits: Limits, name: str = "") -> Extracted:
    import openpyxl

    budget, writer = Budget(limits), Writer()
    workbook = openpyxl.load_workbook(file, read_only=True, data_only=True)
    try:
        for sheet in workbook.worksheets:
            rows = []
            for row in sheet.iter_rows(values_only=True):
                if any(v is not None and str(v).strip() for v in row):
                    rows.append(list(row))
                    budget.spend("|".join("" if v is None else str(v) for v in row))
            if rows:
                writer.heading(1, sheet.title)
                writer.block(table(rows))
        properties = _properties(workbook.properties)
    finally:
        workbook.close()
    return _done(writer, XLSX, properties, name)
