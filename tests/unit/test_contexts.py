"""What an offline context says of an extracted document, for any kind of document: the cover line
only from a cover, a page's title and a table's column header on every chunk cut from them, key
terms per section, and the defects found when documents that are not SEC filings went through
the filing rules (a research paper, a French annual report, a manual)."""

from __future__ import annotations

from tests.documents import make
from tests.unit.test_extraction import COVER, extract


def contexts(data: bytes, name: str, chunk_tokens: int = 60) -> list[tuple[object, str]]:
    """(chunk, its keywords context) for a file, as the chunk and contextualize stages make them."""
    return [(c, ctx.text) for c, ctx in situated(data, name, chunk_tokens)]


def situated(data: bytes, name: str, chunk_tokens: int = 60, embed_header: str = "cover") -> list[tuple[object, object]]:
    """(chunk, its keywords ``Context``) for a file, in a collection with this ``embed_header``."""
    from workers.chunks import recipe
    from workers.contextualizers import registry
    from workers.contextualizers.base import SourceDocument
    from workers.storage.catalog import CollectionConfig

    doc = extract(data, name)
    found = doc.to_json()
    text = found.pop("text")
    config = CollectionConfig(name=f"t-{embed_header}", contextualizer="keywords", chunk_tokens=chunk_tokens,
                              embed_header=embed_header)
    payload = {"text": text, "metadata": {"path": name}, "extracted": found}
    chunks, language, _ = recipe.chunks_of(config, payload)
    source_doc = SourceDocument("t", name, "v", text, language, {"path": name}, chunks, structure=found)
    return list(registry.for_collection(config).contextualize(source_doc, chunks))


MANUAL = [["Kelp Farming Field Guide", "Coastal Growers Cooperative", "How to seed, tend and harvest sugar kelp."],
          ["2 Seeding", "Seed lines are wound on spools in the hatchery in autumn."],
          ["3 Harvest", "Blades are cut in spring, before fouling organisms settle on them."]]


def test_a_vector_reads_the_document_line_of_a_cover_only():
    """What of the header a chunk's vector reads (``Header.for_vector``). A filing's issuer, form
    and period tell its chunks from the same page of another filing of that form; a manual's
    title, guessed from its first page and repeated on every chunk, pulls its pages together: it
    stays in the BM25 context only. Every chunk keeps its place (section, page title) in the vector.
    Before the rule, every vector read the manual's title."""
    manual = [(c, ctx) for c, ctx in situated(make.pdf(MANUAL), "kelp-guide.pdf") if c.pages[0] > 1]  # past the title page
    assert len(manual) >= 2
    for _chunk, context in manual:
        assert "Kelp Farming Field Guide" in context.text.splitlines()[0]  # BM25 still has it
        assert "Kelp Farming Field Guide" not in context.embed and "kelp guide" not in context.embed, context.embed
        assert context.embed in ("2 Seeding", "3 Harvest"), context.embed  # its place: the page's own title
    filing = situated(make.pdf([COVER, ["PART II", "Item 8. Financial Statements", "Revenue grew in every region."]]),
                      "otterworks-2024-10k.pdf")
    for _chunk, context in filing:
        assert context.embed.startswith("OTTERWORKS, INC · Form 10-K · fiscal year ended December 31, 2024"), context.embed


def test_collections_keep_the_vector_header_they_were_made_with():
    """A collection stored before ``embed_header`` existed reads as ``all`` (its vectors read the
    document line of every document, as they were made); ``none`` reads the chunk alone."""
    from workers.storage.catalog import CollectionConfig

    assert CollectionConfig.model_validate_json('{"name": "old"}').embed_header == "all"
    everything = situated(make.pdf(MANUAL), "kelp-guide.pdf", embed_header="all")
    assert all(context.embed.startswith("Kelp Farming Field Guide") for _, context in everything)
    assert all(context.embed == "" for _, context in situated(make.pdf(MANUAL), "kelp-guide.pdf", embed_header="none"))


def test_a_results_release_names_its_issuer_without_a_ticker():
    from workers.extraction import cover

    release = "Amcor reports fiscal 2023 results and provides outlook for fiscal 2024\nJune 2023 quarter:\n"
    assert cover.of(release, {}, "AMCOR_2023Q4_EARNINGS.pdf")["organisation"] == "Amcor"
    assert "organisation" not in cover.of("The committee reports that results were mixed.\n", {}, "minutes.pdf")
    assert "organisation" not in cover.of("our survey reports results by region\n", {}, "survey.pdf")


def test_a_paper_that_quotes_a_filing_is_not_the_filing():
    """A research paper that mentions "FORM 10-K" and "Apple Inc. (NASDAQ: AAPL)" was given
    ``Shares of Apple Inc · Form 10-K · year ended December 31, 2019`` on every chunk."""
    paper = make.pdf([["Measuring Disclosure Quality in Annual Reports", "Ada Lovelace and Alan Turing",
                       "We study how firms such as Apple Inc. (NASDAQ: AAPL) write the FORM 10-K they file",
                       "for the year ended December 31, 2019, and what readers make of it."],
                      ["1 Introduction", "Disclosure quality has been measured by readability scores."]],
                     title="Microsoft Word - paper_v3.docx")
    first_line = contexts(paper, "paper_v3.pdf")[0][1].splitlines()[0]
    assert first_line.startswith("Measuring Disclosure Quality in Annual Reports"), first_line
    assert "Form 10-K" not in first_line and "Apple" not in first_line and "Microsoft Word" not in first_line


def test_a_filing_cover_is_still_read_as_one():
    filing = make.pdf([COVER, ["PART II", "Item 8. Financial Statements", "Revenue grew in every region."]])
    first_line = contexts(filing, "otterworks-2024-10k.pdf")[0][1].splitlines()[0]
    assert first_line.startswith("OTTERWORKS, INC · Form 10-K · fiscal year ended December 31, 2024 · FY2024")


def test_a_french_annual_report_keeps_its_words_and_its_title():
    from workers.extraction import cover

    assert cover.file_words("rapport_société_générale_2022.pdf") == ["rapport", "société", "générale", "2022"]
    assert cover.file_words("AMCOR_2023Q2_10Q.pdf") == ["AMCOR", "2023", "Q2", "10Q"]
    assert cover.file_words("379f44022bb27aa53efd5d322c7b57bf.pdf") == []  # a hash names nothing
    report = make.pdf([["Rapport annuel 2022", "Société Générale", "Le produit net bancaire a progressé de 4 %."]],
                      title="Untitled")
    first_line = contexts(report, "rapport_société_générale_2022.pdf")[0][1].splitlines()[0]
    assert first_line.startswith("Rapport annuel 2022") and "Untitled" not in first_line
    assert "rapport société générale 2022" in first_line and "soci t" not in first_line


def test_titles_a_document_editor_wrote_are_not_titles():
    from workers.extraction import cover

    for placeholder in ("Untitled", "Microsoft Word - x.docx", "Microsoft PowerPoint - deck.pptx", "Presentation1",
                        "0001018724-18-000005", "report.pdf"):
        assert cover.meaningful_title(placeholder, "report.pdf") == "", placeholder
    assert cover.meaningful_title("Kelp Farming Guide", "guide.pdf") == "Kelp Farming Guide"


def test_a_manuals_item_and_part_lines_are_not_a_filings_sections():
    manual = make.pdf([["Espresso machine: user manual", "Part I Getting started",
                        "Item 3: the water filter. Rinse it before the first use."],
                       ["Part II Cleaning", "Item 7: the drip tray. Empty it every day."]])
    doc = extract(manual, "espresso-manual.pdf")
    assert not any(title.startswith(("Part", "Item")) for _, _, title in doc.headings), doc.headings
    filing = extract(make.pdf([COVER, ["PART II", "Item 8. Financial Statements", "Figures follow."]]), "f-10k.pdf")
    assert (2, "Item 8. Financial Statements") in [(level, t) for _, level, t in filing.headings]


def test_a_press_releases_issuer_is_the_name_before_its_ticker():
    from workers.extraction import cover

    release = ("FOR IMMEDIATE RELEASE\nWidget Holdings Reports Record Quarter\nNEW YORK, March 3, 2023 - Widget "
               "Holdings (NASDAQ: WDGT) today reported results for its fourth quarter.")
    assert cover.of(release, {}, "widget-q4.pdf")["organisation"] == "Widget Holdings"
    assert "organisation" not in cover.of("Our study cites Widget Holdings (NASDAQ: WDGT) twice.", {}, "paper.pdf")


def test_initials_stay_and_small_capitals_are_mended():
    from workers.extraction import cover

    sec = ("UNITED STATES\nSECURITIES AND EXCHANGE COMMISSION\nFORM 10-K\n{name}\n"
           "(Exact name of registrant as specified in its charter)")
    assert cover.of(sec.format(name="T ROWE PRICE GROUP, INC."), {})["organisation"] == "T ROWE PRICE GROUP, INC"
    assert cover.of(sec.format(name="MGM R ESORTS I NTERNATIONAL"), {})["organisation"] == "MGM RESORTS INTERNATIONAL"


def test_a_52_53_week_year_ending_in_early_january_is_the_year_before():
    from workers.extraction import cover

    sec = "SECURITIES AND EXCHANGE COMMISSION\nFORM 10-K\nFor the fiscal year ended {date}\n"
    assert cover.of(sec.format(date="January 1, 2023"), {})["year"] == "2022"
    assert cover.of(sec.format(date="January 28, 2023"), {})["year"] == "2023"  # Best Buy's fiscal 2023
    assert cover.of(sec.format(date="December 31, 2022"), {})["year"] == "2022"


def test_every_chunk_of_a_statement_knows_the_statement_and_its_columns():
    """The chunk of a cash-flow statement's investing section, cut from the page's first chunk,
    said only ``PART II › Item 8``: no statement title, no column years."""
    rows = [f"Line item number {i} of operating activities {1000 + i} {900 + i} {800 + i}" for i in range(30)]
    rows += [f"Purchases of property, plant and equipment item {i} ({100 + i}) ({90 + i}) ({80 + i})" for i in range(10)]
    statement = ["Otterworks, Inc. and Subsidiaries", "Consolidated Statements of Cash Flows", "(Dollars in millions)",
                 "Years ended December 31, 2024 2023 2022", *rows]
    found = contexts(make.pdf([COVER, ["PART II", "Item 8. Financial Statements", "See the statements."], statement]),
                     "otterworks-2024-10k.pdf", chunk_tokens=120)
    on_page = [(c, ctx) for c, ctx in found if c.pages and c.pages[0] == 3]
    assert len(on_page) >= 3
    for chunk, context in on_page:
        assert "Consolidated Statements of Cash Flows" in context, context
        if "Years ended December 31" not in chunk.text:
            assert "Years ended December 31, 2024 2023 2022" in context, context


def test_key_terms_are_the_sections_own():
    from workers.chunks.splitting import Chunk
    from workers.contextualizers import keywords

    chunks = [Chunk(0, "Senior notes mature in 2030; the notes carry a fixed coupon.", None, None, section="Note 9 Debt"),
              Chunk(1, "The revolving credit facility and the senior notes.", None, None, section="Note 9 Debt"),
              Chunk(2, "Purchases of equipment and investing activities used cash.", None, None, section="Cash Flows"),
              Chunk(3, "Capital expenditure on equipment rose.", None, None, section="Cash Flows")]
    terms = keywords.section_terms(chunks, 3)
    assert "notes" in terms["Note 9 Debt"] and "notes" not in terms["Cash Flows"]
    assert "equipment" in terms["Cash Flows"] and "equipment" not in terms["Note 9 Debt"]
