"""CSV (and TSV): one Markdown table, its first row the header; the chunker splits a long one by
rows, repeating the header in each piece."""

from __future__ import annotations

import csv
import io

from workers.errors import ExtractionError
from workers.extraction import cover
from workers.extraction.document import Extracted
from workers.extraction.limits import Budget, Limits
from workers.extraction.markdown import Writer, table

MEDIA_TYPE = "text/csv"


def extract(raw: bytes, limits: Limits, name: str = "") -> Extracted:
    budget = Budget(limits)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ExtractionError(f"not valid UTF-8 (byte {e.start})") from None
    sample = text[:20_000]
    try:
        dialect = csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel_tab if name.lower().endswith(".tsv") else csv.excel
    csv.field_size_limit(1_000_000)
    rows = []
    try:
        for row in csv.reader(io.StringIO(text), dialect):
            budget.spend("|".join(row))
            rows.append(row)
    except csv.Error as e:
        raise ExtractionError(f"malformed CSV: {e}") from None
    rendered = table(rows)
    if not rendered:
        raise ExtractionError("no rows in the CSV")
    writer = Writer()
    writer.block(rendered)
    return writer.done(MEDIA_TYPE, profile=cover.of("", {}, name))
