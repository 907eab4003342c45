"""HTML and XHTML: the page's main content, as Markdown. trafilatura (Apache-2.0) finds it —
navigation, headers, footers, sidebars, scripts and styles dropped, headings, lists, tables and
code kept — and reads the title and date from the page's metadata. Sphinx's "¶" header links
and similar anchors are removed from headings.

lxml parses it; a document nested deeper than libxml2 allows, or with nothing that reads as
content, fails with that reason rather than indexing markup.
"""

from __future__ import annotations

import re

from workers.errors import ExtractionError
from workers.extraction import cover
from workers.extraction.document import Extracted
from workers.extraction.limits import Budget, Limits
from workers.extraction.markdown import Writer

MEDIA_TYPE = "text/html"
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*[¶#§]?\s*$")
_ANCHOR = re.compile(r"\s*[¶§]\s*$")


def extract(raw: bytes, limits: Limits, name: str = "") -> Extracted:
    import trafilatura

    budget = Budget(limits)
    markdown = trafilatura.extract(raw, output_format="markdown", include_tables=True, include_formatting=True,
                                   include_links=False, include_images=False, include_comments=False,
                                   favor_recall=True, deduplicate=False)
    if not markdown or not markdown.strip():
        raise ExtractionError("no main text found in the HTML (empty, all navigation, or too deeply nested to parse)")
    budget.spend(markdown)
    meta = trafilatura.extract_metadata(raw)
    properties = {k: str(v) for k, v in {"title": getattr(meta, "title", None), "author": getattr(meta, "author", None),
                                         "date": getattr(meta, "date", None),
                                         "site": getattr(meta, "sitename", None)}.items() if v}
    writer = Writer()
    block: list[str] = []
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = None if in_code else _HEADING.match(line)
        if heading:
            writer.block("\n".join(block))
            block = []
            writer.heading(len(heading.group(1)), _ANCHOR.sub("", heading.group(2)))
        elif not line.strip() and not in_code:
            writer.block("\n".join(block))
            block = []
        else:
            block.append(line)
    writer.block("\n".join(block))
    title = cover.meaningful_title(properties.get("title", ""), name)
    return writer.done(MEDIA_TYPE, title=title, properties=properties,
                       profile=cover.of(markdown[:20_000], properties, name))
