"""Files of every format the extractors read, made here: good ones with known pages, headings
and tables, and hostile or broken ones (``hostile``), each with the reason it must fail for.

PDFs are written by hand (a few objects, a cross-reference table, the standard Helvetica font):
no PDF writer to install, and every byte known."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf(pages: list[list[str]], title: str = "", outline: list[tuple[str, int]] | None = None) -> bytes:
    """A PDF whose page i shows ``pages[i]``, one line each; an Info title; bookmarks
    ``(title, page index)``."""
    objects: list[bytes] = []

    def add(body: str | bytes) -> int:
        objects.append(body.encode("latin-1") if isinstance(body, str) else body)
        return len(objects)

    catalog = add("")  # filled in below
    pages_obj = add("")
    font = add("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    kids = []
    for lines in pages:
        ops = ["BT", "/F1 11 Tf", "14 TL", "72 740 Td"] + [f"({_escape(line)}) Tj T*" for line in lines] + ["ET"]
        stream = "\n".join(ops).encode("latin-1", "replace")
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        kids.append(add(f"<< /Type /Page /Parent {pages_obj} 0 R /MediaBox [0 0 612 792] "
                        f"/Resources << /Font << /F1 {font} 0 R >> >> /Contents {content} 0 R >>"))
    objects[pages_obj - 1] = f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(kids)} >>".encode()
    outlines = ""
    if outline:
        root = add("")
        items = []
        for _ in outline:
            items.append(add(""))
        for i, (t, index) in enumerate(outline):
            links = (f" /Prev {items[i - 1]} 0 R" if i else "") + (f" /Next {items[i + 1]} 0 R" if i + 1 < len(items) else "")
            objects[items[i] - 1] = (f"<< /Title ({_escape(t)}) /Parent {root} 0 R /Dest [{kids[index]} 0 R /Fit]"
                                     f"{links} >>").encode("latin-1")
        objects[root - 1] = f"<< /Type /Outlines /First {items[0]} 0 R /Last {items[-1]} 0 R /Count {len(items)} >>".encode()
        outlines = f" /Outlines {root} 0 R"
    objects[catalog - 1] = f"<< /Type /Catalog /Pages {pages_obj} 0 R{outlines} >>".encode()
    info = add(f"<< /Title ({_escape(title)}) >>") if title else None
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    trailer = f"trailer\n<< /Size {len(objects) + 1} /Root {catalog} 0 R" + (f" /Info {info} 0 R" if info else "") + " >>\n"
    out.write(trailer.encode() + b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


def docx(path: Path, title: str, sections: list[tuple[str, list[str]]], table: list[list[str]] | None = None) -> Path:
    import docx as python_docx

    document = python_docx.Document()
    document.core_properties.title = title
    document.add_heading(title, level=0)
    for heading, paragraphs in sections:
        document.add_heading(heading, level=1)
        for text in paragraphs:
            document.add_paragraph(text)
    if table:
        document.add_paragraph("Table 1: figures by year")
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    document.save(str(path))
    return path


def pptx(path: Path, slides: list[tuple[str, list[str]]]) -> Path:
    import pptx as python_pptx

    presentation = python_pptx.Presentation()
    for title, bullets in slides:
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = title
        body = slide.placeholders[1].text_frame
        body.text = bullets[0]
        for bullet in bullets[1:]:
            body.add_paragraph().text = bullet
    presentation.save(str(path))
    return path


def xlsx(path: Path, sheets: dict[str, list[list[object]]]) -> Path:
    import openpyxl

    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for name, rows in sheets.items():
        sheet = workbook.create_sheet(name)
        for row in rows:
            sheet.append(row)
    workbook.save(str(path))
    return path


SPHINX_PAGE = """<!DOCTYPE html>
<html><head><title>Rotating keys — Vault guide</title>
<script>var tracking = "SCRIPTBODYTERM";</script><style>.nav {{ color: red }}</style></head>
<body><div class="related" role="navigation"><ul><li><a href="index.html">NAVLINKTERM index</a></li></ul></div>
<div class="sphinxsidebar" role="navigation"><h3>Navigation</h3><ul><li>SIDEBARTERM</li></ul></div>
<div class="document"><div class="body" role="main">
<section id="rotating-keys"><h1>Rotating keys<a class="headerlink" href="#rotating-keys">¶</a></h1>
<p>{intro}</p>
<section id="schedule"><h2>Schedule<a class="headerlink" href="#schedule">¶</a></h2>
<p>{schedule}</p>
<table><tr><th>key</th><th>every</th></tr><tr><td>signing</td><td>90 days</td></tr>
<tr><td>transport</td><td>30 days</td></tr></table>
</section></section></div></div>
<div class="footer">© FOOTERTERM 2026</div></body></html>"""


# -- files that must fail alone, with the reason they fail for -----------------------------------

def hostile(folder: Path) -> dict[str, str]:
    """Writes the hostile files into ``folder``; returns file name -> a phrase its error contains."""
    import pypdfium2 as pdfium

    folder.mkdir(parents=True, exist_ok=True)
    expected = {}

    good = pdf([["A page with a little text on it, enough to count."]])
    (folder / "truncated.pdf").write_bytes(good[:300])
    expected["truncated.pdf"] = "not a readable PDF"

    blank = pdfium.PdfDocument.new()
    for _ in range(3):
        blank.new_page(612, 792)
    blank.save(str(folder / "scan.pdf"))
    expected["scan.pdf"] = "no text layer"

    many = pdfium.PdfDocument.new()
    for _ in range(10_000):
        many.new_page(612, 792)
    many.save(str(folder / "ten-thousand-pages.pdf"))
    expected["ten-thousand-pages.pdf"] = "over the limit"

    (folder / "not-really.pdf").write_bytes(b"%PDF-1.7\n" + b"\x00garbage\xff" * 500)
    expected["not-really.pdf"] = "not a readable PDF"

    encrypted = encrypted_pdf()
    if encrypted:
        (folder / "encrypted.pdf").write_bytes(encrypted)
        expected["encrypted.pdf"] = "encrypted"

    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        with z.open("word/document.xml", "w", force_zip64=True) as part:
            for _ in range(300):
                part.write(b"\x00" * 1_000_000)
    (folder / "bomb.docx").write_bytes(bomb.getvalue())
    expected["bomb.docx"] = "zip bomb"

    laughs = io.BytesIO()
    entities = '<!ENTITY lol "lol">' + "".join(f'<!ENTITY lol{i} "{"&lol%s;" % ("" if i == 1 else i - 1) * 10}">'
                                              for i in range(1, 10))
    with zipfile.ZipFile(laughs, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types/>')
        z.writestr("word/document.xml", f'<?xml version="1.0"?><!DOCTYPE lolz [{entities}]><w:document>&lol9;</w:document>')
    (folder / "laughs.docx").write_bytes(laughs.getvalue())
    expected["laughs.docx"] = "DTD or XML entities"

    (folder / "nested.html").write_bytes(b"<!DOCTYPE html><html><body>" + b"<div>" * 1_000_000 + b"x" + b"</div>" * 10)
    expected["nested.html"] = "HTML"

    (folder / "legacy.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600)
    expected["legacy.doc"] = "legacy binary Office"

    (folder / "empty.pdf").write_bytes(b"")
    expected["empty.pdf"] = "empty"

    return expected


def encrypted_pdf() -> bytes | None:
    """A password-protected PDF (pypdf writes one; None where it is not installed)."""
    try:
        from pypdf import PdfWriter
    except ImportError:
        return None
    writer = PdfWriter()
    writer.add_blank_page(612, 792)
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# -- files a hostile tenant sends to harm the others (Security III) -------------------------------

def _rewrite_part(data: bytes, part: str, change) -> bytes:
    """The zip ``data`` with one part's bytes replaced by ``change(its bytes)``."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            body = src.read(info.filename)
            dst.writestr(info.filename, change(body) if info.filename == part else body)
    return out.getvalue()


def noisy_xlsx(path: Path) -> bytes:
    """A workbook whose named style points at a cell format of 4,299 digits: openpyxl *prints*
    "<the number> is out of range" to stdout before it fails."""
    import re

    plain = xlsx(path, {"Sheet": [["quarter", "sales"], ["Q1", 10]]}).read_bytes()
    return _rewrite_part(plain, "xl/styles.xml",
                         lambda b: re.sub(rb'(<cellStyle [^>]*xfId=")0"', rb'\g<1>' + b"9" * 4299 + b'"', b, count=1))


def emoji_xlsx(emoji: int = 10_000, cells: int = 1_990, char: str = "\U0001F600") -> bytes:
    """One shared string of ``emoji`` emoji (or ``char``), referenced by ``cells`` cells: ~12 KB
    on disk, ``emoji * cells`` characters of text, four bytes each in UTF-8 (twelve as JSON
    escapes). Written part by part: openpyxl would write the string into every cell."""
    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    rows = "".join(f'<row r="{r + 1}">' + "".join(f'<c r="{chr(65 + c)}{r + 1}" t="s"><v>0</v></c>' for c in range(10))
                   + "</row>" for r in range(cells // 10))
    parts = {
        "[Content_Types].xml": '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
        'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/><Override PartName="/xl/workbook.xml" ContentType='
        '"application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/><Override PartName="/xl/'
        'worksheets/sheet1.xml" ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
        '<Override PartName="/xl/sharedStrings.xml" ContentType="application/vnd.openxmlformats-officedocument.'
        'spreadsheetml.sharedStrings+xml"/></Types>',
        "_rels/.rels": f'<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/'
        f'relationships"><Relationship Id="rId1" Type="{rel}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        "xl/workbook.xml": f'<?xml version="1.0"?><workbook {ns} xmlns:r="{rel}"><sheets><sheet name="Sheet" sheetId="1" '
        'r:id="rId1"/></sheets></workbook>',
        "xl/_rels/workbook.xml.rels": f'<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/'
        f'package/2006/relationships"><Relationship Id="rId1" Type="{rel}/worksheet" Target="worksheets/sheet1.xml"/>'
        f'<Relationship Id="rId2" Type="{rel}/sharedStrings" Target="sharedStrings.xml"/></Relationships>',
        "xl/worksheets/sheet1.xml": f'<?xml version="1.0"?><worksheet {ns}><sheetData>{rows}</sheetData></worksheet>',
        "xl/sharedStrings.xml": f'<?xml version="1.0" encoding="UTF-8"?><sst {ns} count="{cells}" uniqueCount="1">'
        f'<si><t>{char * emoji}</t></si></sst>',
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, text in parts.items():
            z.writestr(name, text.encode("utf-8"))
    return out.getvalue()


def doctype_xlsx(path: Path, comment_bytes: int = 5_000) -> bytes:
    """A workbook whose sheet declares an internal entity after a long comment (past the first
    4,096 bytes a prefix check read), and uses it in a cell."""
    plain = xlsx(path, {"Sheet": [["word"], ["PLACEHOLDER"]]}).read_bytes()

    def declare(body: bytes) -> bytes:
        declaration = body[:body.index(b"?>") + 2] if body.startswith(b"<?xml") else b""
        rest = body[len(declaration):].replace(b"PLACEHOLDER", b"INTERNALENTITY&e;INTERNALENTITY&e;")
        return declaration + b"<!--" + b"x" * comment_bytes + b'--><!DOCTYPE worksheet [<!ENTITY e "EXPANDED">]>' + rest
    return _rewrite_part(plain, "xl/worksheets/sheet1.xml", declare)


def xobject_bomb(pages: int, wide: int = 10, deep: int = 5) -> bytes:
    """A PDF whose every page draws one form XObject that draws ``wide`` copies of the next,
    ``deep`` levels down to a leaf with one word of text: ``wide ** deep`` draws a page from a few
    hundred bytes in all (0.7 s of pdfium a page here, 340 KB for 2,000 pages)."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog, pages_obj = add(b""), add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")

    def form(content: bytes, resources: bytes) -> int:
        return add(b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources " + resources
                   + b" /Length %d >>\nstream\n" % len(content) + content + b"\nendstream")

    level = form(b"BT /F1 9 Tf 72 700 Td (kelp) Tj ET", b"<< /Font << /F1 %d 0 R >> >>" % font)
    for _ in range(deep):
        level = form(b"q /X Do Q\n" * wide, b"<< /XObject << /X %d 0 R >> >>" % level)
    content = add(b"<< /Length 8 >>\nstream\n/X Do   \nendstream")
    kids = [add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /XObject << /X %d 0 R >> >> "
                b"/Contents %d 0 R >>" % (pages_obj, level, content)) for _ in range(pages)]
    objects[pages_obj - 1] = b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % k for k in kids) + b"] /Count %d >>" % pages
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % pages_obj
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    out.write(b"".join(b"%010d 00000 n \n" % o for o in offsets))
    out.write(b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, catalog, xref))
    return out.getvalue()


def zip_directory(entries: int) -> bytes:
    """An OOXML-looking zip (its first part a Word document's) whose central directory lists
    ``entries`` entries, all of them that one part (overlapping entries cost nothing to add):
    ~55 bytes an entry of directory that a reader parses whole (1.3 M entries: 70 MB). Written by
    hand: zipfile would take minutes."""
    import struct
    import zlib

    name, body = b"word/document.xml", b'<?xml version="1.0"?><w:document/>'
    crc = zlib.crc32(body)
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 0, 0, 0, crc, len(body), len(body), len(name), 0) + name + body
    record = struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, crc, len(body), len(body),
                         len(name), 0, 0, 0, 0, 0, 0) + name
    directory = record * entries
    start = len(local)
    if entries <= 0xFFFF:
        return local + directory + struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, entries, entries, len(directory), start, 0)
    record_at = start + len(directory)  # zip64: the counts in a zip64 end record, found through its locator
    return (local + directory
            + struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, len(directory), start)
            + struct.pack("<4sIQI", b"PK\x06\x07", 0, record_at, 1)
            + struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
