"""Extraction and layout chunking, without services: files made here (``tests/documents/make``),
read by the real extractors in the real sandbox process."""

from __future__ import annotations

import pytest

from tests.documents import make
from workers import errors

COVER = ["UNITED STATES SECURITIES AND EXCHANGE COMMISSION", "FORM 10-K",
         "ANNUAL REPORT PURSUANT TO SECTION 13 OR 15(d) OF THE SECURITIES EXCHANGE ACT OF 1934",
         "For the fiscal year ended December 31, 2024", "Commission File Number 1-12345", "OTTERWORKS, INC.",
         "(Exact name of registrant as specified in its charter)"]


def report_pdf(pages: int = 6) -> bytes:
    """A filing: a cover, a contents page, Part II with Item 8 and a balance sheet; every page
    with a running header and a page number."""
    body = [COVER]
    body.append(["Table of Contents", "Item 1. Business 3", "Item 7. Management's Discussion 4", "Item 8. Financial Statements 5",
                 "Item 9. Changes in Accountants 6"])
    body.append(["PART I", "Item 1. Business", "Otterworks builds kelp farms along the northern coast."])
    body.append(["PART II", "Item 7. Management's Discussion and Analysis",
                 "Revenue grew 3% over the previous year, driven by seaweed exports."])
    body.append(["Item 8. Financial Statements", "CONSOLIDATED BALANCE SHEETS", "Cash and cash equivalents $ 5,794 $ 4,225",
                 "Total assets $ 19,845 $ 17,890"])
    body.append(["CONSOLIDATED STATEMENTS OF CASH FLOWS", "Purchases of property and equipment (116) (131)"])
    return make.pdf([["Otterworks Annual Report 2024", *lines, f"{i + 1}"] for i, lines in enumerate(body[:pages])])


def extract(data: bytes, name: str):
    from workers.extraction import detect, sandbox
    from workers.extraction.limits import Limits

    return sandbox.extract(data, detect.media_type(data, name), name, Limits())


def test_a_pdf_is_read_page_by_page_without_its_running_lines_and_with_its_sections():
    doc = extract(report_pdf(), "otterworks-2024-10k.pdf")
    assert doc.pages_total == 6 and len(doc.pages) == 6 and doc.pages_without_text == 0
    assert "Otterworks Annual Report 2024" not in doc.text  # the running header, on every page
    assert "\n6\n" not in doc.text + "\n" and not doc.text.rstrip().endswith("6")  # the page numbers
    assert doc.page_of(doc.text.index("CONSOLIDATED BALANCE SHEETS")) == 5
    titles = [(level, title) for _, level, title in doc.headings]
    assert (1, "PART II") in titles and (2, "Item 8. Financial Statements") in titles
    assert (3, "Consolidated Balance Sheets") in titles
    assert not any("Business 3" in t for _, t in titles), "a contents line is not a heading"
    assert doc.profile["organisation"] == "OTTERWORKS, INC" and doc.profile["form"] == "Form 10-K"
    assert doc.profile["period"] == "fiscal year ended December 31, 2024" and doc.profile["year"] == "2024"


def test_a_title_drawn_twice_over_itself_is_read_once():
    """Some generators draw bold as each glyph twice: the text layer says "NNEEBBRRAASSKKAA"."""
    doc = extract(make.pdf([["NNEEBBRRAASSKKAA HHIISSTTOORRIICC", "Bbuuiillddiinnggss Ssuurrvveeyy",
                             "Built in 1100, the bookkeeper's hall stood by the Mississippi."]]), "survey.pdf")
    assert doc.text.splitlines()[:2] == ["NEBRASKA HISTORIC", "Buildings Survey"]
    assert "Built in 1100, the bookkeeper's hall stood by the Mississippi." in doc.text  # words, numbers untouched
    assert doc.title.startswith("NEBRASKA HISTORIC")


def test_layout_chunks_cite_their_pages_and_sections_and_never_cross_a_page():
    from workers.chunks import layout

    doc = extract(report_pdf(), "otterworks-2024-10k.pdf")
    chunks = layout.chunks_of(doc, 40)
    assert chunks and all(c.pages and c.pages[0] == c.pages[1] for c in chunks)
    balance = next(c for c in chunks if "Total assets" in c.text)
    assert balance.pages == (5, 5)
    assert balance.section == "PART II › Item 8. Financial Statements › Consolidated Balance Sheets"
    flows = next(c for c in chunks if "Purchases of property" in c.text)
    assert flows.pages == (6, 6) and flows.section.endswith("Consolidated Statements of Cash Flows")


def test_a_bookmarked_pdf_takes_its_sections_from_its_outline():
    data = make.pdf([["Overview", "Kelp grows fast."], ["Risks", "Storms break the lines."]], title="Kelp Farming Guide",
                    outline=[("1 Overview", 0), ("2 Risks", 1)])
    doc = extract(data, "guide.pdf")
    assert [(t, doc.page_of(at)) for at, _, t in doc.headings] == [("1 Overview", 1), ("2 Risks", 2)]
    assert doc.title == "Kelp Farming Guide"


def test_formats_are_told_by_their_content():
    from workers.extraction import detect

    pdf = make.pdf([["A page."]])
    assert detect.media_type(pdf, "notes.txt") == "application/pdf"  # the name lies
    assert detect.media_type(b"<!DOCTYPE html><html><body>x</body></html>", "page.txt") == "text/html"
    assert detect.media_type(b"a,b\n1,2\n", "t.csv") == "text/csv"
    assert detect.media_type(b"# Notes\n\nplain text", "notes.md") == detect.TEXT
    with pytest.raises(errors.Unsupported, match="PNG"):
        detect.media_type(b"\x89PNG\r\n\x1a\n....", "x.pdf")
    with pytest.raises(errors.Unsupported, match="not one"):
        detect.media_type(b"just some text", "report.pdf")


def test_office_files_keep_their_headings_tables_and_slides(tmp_path):
    docx = make.docx(tmp_path / "g.docx", "Vault guide", [("Rotating keys", ["Rotate the signing key every 90 days."]),
                                                         ("Revoking", ["Revoke a key at once when it leaks."])],
                     table=[["key", "every"], ["signing", "90 days"], ["transport", "30 days"]])
    doc = extract(docx.read_bytes(), "g.docx")
    assert doc.title == "Vault guide" and [t for _, _, t in doc.headings][:3] == ["Vault guide", "Rotating keys", "Revoking"]
    assert "| signing | 90 days |" in doc.text
    deck = make.pptx(tmp_path / "d.pptx", [("Roadmap", ["Kelp in Q1", "Otters in Q2"]), ("Budget", ["Flat"])])
    slides = extract(deck.read_bytes(), "d.pptx")
    assert slides.pages_total == 2 and slides.page_of(slides.text.index("Budget")) == 2
    book = make.xlsx(tmp_path / "f.xlsx", {"Revenue": [["year", "usd"], [2023, 10], [2024, 12]],
                                           "Costs": [["year", "usd"], [2024, 7]]})
    sheets = extract(book.read_bytes(), "f.xlsx")
    assert [t for _, _, t in sheets.headings] == ["Revenue", "Costs"] and "| 2024 | 12 |" in sheets.text


def test_html_keeps_the_main_content_and_drops_scripts_navigation_and_anchors():
    page = make.SPHINX_PAGE.format(intro="Keys are rotated on a schedule so that a leaked key expires on its own. " * 3,
                                   schedule="The signing key rotates every ninety days, the transport key monthly. " * 3)
    doc = extract(page.encode(), "rotate.html")
    assert "ninety days" in doc.text and "Rotating keys" in doc.text
    for noise in ("SCRIPTBODYTERM", "NAVLINKTERM", "SIDEBARTERM", "FOOTERTERM", "¶", "<p>"):
        assert noise not in doc.text, noise
    assert [t for _, _, t in doc.headings][:2] == ["Rotating keys", "Schedule"]


def test_a_long_table_is_cut_by_rows_each_piece_with_its_caption_and_header():
    from workers.chunks import layout
    from workers.extraction.markdown import Writer, table

    writer = Writer()
    writer.heading(1, "Sales")
    writer.block("Table 3: sales by region and month")
    writer.block(table([["region", "month", "sales"]] + [[f"region {i}", "March", str(1000 + i)] for i in range(120)]))
    writer.block(table([["small", "table"], ["a", "b"]]))
    doc = writer.done("text/csv")
    chunks = layout.chunks_of(doc, 80)
    pieces = [c for c in chunks if "| region | month | sales |" in c.text]
    assert len(pieces) > 3
    for piece in pieces:
        assert "Table 3: sales by region and month" in piece.text and "| region | month | sales |" in piece.text
    rows = [line for c in pieces for line in c.text.splitlines() if line.startswith("| region ") and "month" not in line]
    assert len(rows) == 120 and len(set(rows)) == 120  # every row once
    assert any("| small | table |" in c.text and "| a | b |" in c.text for c in chunks)  # a small one stays whole


@pytest.mark.parametrize("name", ["truncated.pdf", "scan.pdf", "ten-thousand-pages.pdf", "not-really.pdf",
                                  "encrypted.pdf", "bomb.docx", "laughs.docx", "nested.html"])
def test_a_hostile_file_fails_with_its_reason_and_the_sandbox_serves_the_next(tmp_path, name):
    from workers.errors import ExtractionError
    from workers.extraction import detect, sandbox
    from workers.extraction.limits import Limits

    expected = make.hostile(tmp_path)
    if name not in expected:
        pytest.skip("pypdf is needed to make an encrypted PDF")  # a test extra: installed by ops/setup
    data = (tmp_path / name).read_bytes()
    with pytest.raises(ExtractionError, match=expected[name].split()[0]) as failure:
        sandbox.extract(data, detect.media_type(data, name), name, Limits())
    assert expected[name].lower() in str(failure.value).lower() or name == "nested.html"
    assert "Otterworks" in extract(report_pdf(2), "after.pdf").text  # the next file, in the same sandbox


def test_a_file_past_the_time_or_memory_limit_stops_its_extractor_not_the_caller():
    from workers.errors import ExtractionError
    from workers.extraction import sandbox
    from workers.extraction.limits import Limits

    data = report_pdf()
    with pytest.raises(ExtractionError, match="took over"):
        sandbox.extract(data, "application/pdf", "r.pdf", Limits(timeout_s=0.0))
    big = b"region,month,sales\n" + b"north,March,1234\n" * 2_000_000  # 34 MB of CSV: ~1 GB once parsed
    with pytest.raises(ExtractionError, match="MB"):
        sandbox.extract(big, "text/csv", "big.csv", Limits(memory_mb=400, max_bytes=10**9))
    assert "Otterworks" in extract(data, "after.pdf").text


def test_threads_extracting_at_once_each_get_their_own_file():
    """A ``--pool threads`` worker runs chunk tasks in threads: each extraction has a child of
    its own for its time (one child's pipe shared by two threads mixed up their replies)."""
    from concurrent.futures import ThreadPoolExecutor

    files = {f"report-{i}.pdf": make.pdf([[f"Company number {i} annual report", f"Revenue was {i * 111} dollars."]] * 3)
             for i in range(12)}
    with ThreadPoolExecutor(6) as threads:
        texts = dict(zip(files, threads.map(lambda name: extract(files[name], name).text, files)))
    for name, text in texts.items():
        i = int(name.split("-")[1].split(".")[0])
        assert f"Company number {i} " in text and f"Revenue was {i * 111} dollars" in text
