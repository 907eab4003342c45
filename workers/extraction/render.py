"""A PDF page as an image, with a chunk's text marked on it: how a reader checks a citation
(``p. 60``) without opening the file elsewhere and scrolling.

pdfium draws the page; the chunk's lines are found again in the page's own text layer (a chunk's
text is the page's text with its running lines dropped and its spaces evened out, so each line is
searched for as it reads, its first ``FIND_CHARS`` characters), and pdfium gives the rectangles
that line's characters cover, which are painted over in a translucent colour. Runs in the sandbox
child (``child``), like every parse of a file a tenant sent: the API never opens a PDF itself.
"""

from __future__ import annotations

import io

from workers.errors import ExtractionError

FIND_CHARS = 60
MIN_LINE_CHARS = 8
MARK = (255, 214, 0, 110)  # a highlighter's yellow, translucent
MAX_PIXELS = 40_000_000    # a page drawn bigger than this is refused (a 200-inch page at 150 dpi)


def page_png(data: bytes, page: int, dpi: int, lines: list[str]) -> tuple[bytes, int]:
    """PNG bytes of 1-based ``page`` at ``dpi``, with ``lines`` marked; and how many were found."""
    import pypdfium2 as pdfium
    from PIL import Image, ImageDraw

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        raise ExtractionError(f"not a readable PDF ({e})") from None
    try:
        if not 1 <= page <= len(pdf):
            raise ExtractionError(f"the file has no page {page} (it has {len(pdf)})")
        sheet = pdf[page - 1]
        scale = dpi / 72
        width, height = sheet.get_width(), sheet.get_height()
        if width * height * scale * scale > MAX_PIXELS:
            raise ExtractionError(f"page {page} is too large to draw at {dpi} dpi")
        image = sheet.render(scale=scale).to_pil().convert("RGBA")
        overlay = Image.new("RGBA", image.size, (0, 0, 0, 0))
        draw = ImageDraw.Draw(overlay)
        textpage = sheet.get_textpage()
        found = 0
        for line in lines:
            wanted = " ".join(line.split())[:FIND_CHARS]
            if len(wanted) < MIN_LINE_CHARS:
                continue
            match = textpage.search(wanted, match_case=False).get_next()
            if match is None:
                continue
            found += 1
            start, count = match
            for i in range(textpage.count_rects(start, count)):
                left, bottom, right, top = textpage.get_rect(i)
                draw.rectangle([left * scale, (height - top) * scale, right * scale, (height - bottom) * scale], fill=MARK)
        textpage.close()
        sheet.close()
    finally:
        pdf.close()
    out = io.BytesIO()
    Image.alpha_composite(image, overlay).convert("RGB").save(out, format="PNG", optimize=False)
    return out.getvalue(), found
