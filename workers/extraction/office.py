"""Word, PowerPoint and Excel files (OOXML: zips of XML), with python-docx, python-pptx and
openpyxl (MIT): headings, paragraphs, lists and tables as Markdown; a presentation's slides as
pages; a workbook's sheets as sections.

Before any library opens one, ``check_zip`` reads the zip's directory and each XML part's first
bytes: a member that expands past ``max_zip_ratio`` times its size or a total past
``max_unzipped_bytes`` (a zip bomb), or an XML part that declares a DTD or entities ("billion
laughs"; OOXML never needs one), fails the file before it is parsed.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from workers.errors import ExtractionError
from workers.extraction import cover
from workers.extraction.document import Extracted
from workers.extraction.limits import Budget, Limits
from workers.extraction.markdown import Writer, table

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def check_zip(path: Path, limits: Limits) -> None:
    try:
        with zipfile.ZipFile(path) as z:
            members = z.infolist()
            total = sum(m.file_size for m in members)
            if total > limits.max_unzipped_bytes:
                raise ExtractionError(f"expands to {total:,} bytes, over {limits.max_unzipped_bytes:,}: a zip bomb?")
            for m in members:
                if m.file_size > 1_000_000 and m.file_size > limits.max_zip_ratio * max(1, m.compress_size):
                    raise ExtractionError(f"{m.filename} expands {m.file_size // max(1, m.compress_size):,} times: "
                                          "a zip bomb?")
                if m.filename.endswith((".xml", ".rels")):
                    with z.open(m) as part:
                        head = part.read(4096).upper()
                    if b"<!DOCTYPE" in head or b"<!ENTITY" in head:
                        raise ExtractionError(f"{m.filename} declares a DTD or XML entities, which Office files never "
                                              "need (an entity-expansion attack?)")
    except zipfile.BadZipFile as e:
        raise ExtractionError(f"not a readable Office file (broken zip: {e})") from None


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


def extract_docx(path: Path, limits: Limits, name: str = "") -> Extracted:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    check_zip(path, limits)
    budget, writer = Budget(limits), Writer()
    document = docx.Document(str(path))
    for element in document.element.body.iterchildren():
        tag = element.tag.rsplit("}", 1)[-1]
        if tag == "p":
            paragraph = Paragraph(element, document)
            text = paragraph.text.strip()
            style = (paragraph.style.name if paragraph.style is not None else "") or ""
            if not text:
                continue
            budget.spend(len(text))
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
            budget.spend(len(rendered))
            writer.block(rendered)
    return _done(writer, DOCX, _properties(document.core_properties), name)


def extract_pptx(path: Path, limits: Limits, name: str = "") -> Extracted:
    import pptx
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    check_zip(path, limits)
    budget, writer = Budget(limits), Writer()
    presentation = pptx.Presentation(str(path))
    slides = list(presentation.slides)
    if len(slides) > limits.max_pages:
        raise ExtractionError(f"{len(slides):,} slides, over the limit of {limits.max_pages:,} (SITUATE_MAX_PAGES)")
    for number, slide in enumerate(slides, start=1):
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
                budget.spend(len(rendered))
                writer.block(rendered)
            elif shape.has_text_frame:
                lines = ["  " * p.level + ("- " if p.level else "") + "".join(r.text for r in p.runs).strip()
                         for p in shape.text_frame.paragraphs]
                text = "\n".join(line for line in lines if line.strip())
                budget.spend(len(text))
                writer.block(text)
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text.strip()
            if notes:
                budget.spend(len(notes))
                writer.block(f"Notes: {notes}")
    return _done(writer, PPTX, _properties(presentation.core_properties), name, pages_total=len(slides))


def extract_xlsx(path: Path, limits: Limits, name: str = "") -> Extracted:
    import openpyxl

    check_zip(path, limits)
    budget, writer = Budget(limits), Writer()
    workbook = openpyxl.load_workbook(str(path), read_only=True, data_only=True)
    try:
        for sheet in workbook.worksheets:
            rows = []
            for row in sheet.iter_rows(values_only=True):
                if any(v is not None and str(v).strip() for v in row):
                    rows.append(list(row))
                    budget.spend(sum(len(str(v)) for v in row if v is not None) + len(row))
            if rows:
                writer.heading(1, sheet.title)
                writer.block(table(rows))
        properties = _properties(workbook.properties)
    finally:
        workbook.close()
    return _done(writer, XLSX, properties, name)
