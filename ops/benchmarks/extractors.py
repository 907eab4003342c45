"""``ops/bench extractors``: PDF text extraction libraries on the FinanceBench filings — pages/s
on one core, and page@10 / doc@10 of plain BM25 over what each extracts (the same layout
chunker, the same index and analyzers: only the text differs). Licences: pypdfium2 Apache-2.0 /
BSD (ours), pypdf BSD, pdfplumber MIT (pdfminer.six); PyMuPDF is AGPL and not tried. Libraries
not installed are skipped (``pip install pypdf pdfplumber``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from ops.benchmarks.common import DATA

PDFS = DATA / "financebench" / "pdfs"


def _pdfium(path: Path) -> list[str]:
    import pypdfium2 as pdfium

    from workers.extraction.pdf import _lines

    pdf = pdfium.PdfDocument(str(path))
    out = []
    for i in range(len(pdf)):
        page = pdf[i]
        textpage = page.get_textpage()
        out.append(_lines(textpage.get_text_range()))
        textpage.close()
        page.close()
    pdf.close()
    return out


def _pypdf(path: Path) -> list[str]:
    from pypdf import PdfReader

    return [page.extract_text() or "" for page in PdfReader(str(path)).pages]


def _pdfplumber(path: Path) -> list[str]:
    import pdfplumber

    with pdfplumber.open(str(path)) as pdf:
        return [page.extract_text() or "" for page in pdf.pages]


LIBRARIES: dict[str, tuple[str, Callable[[Path], list[str]]]] = {
    "pypdfium2": ("pypdfium2", _pdfium), "pypdf": ("pypdf", _pypdf), "pdfplumber": ("pdfplumber", _pdfplumber)}


def _page_at_10(name: str, pages_of: dict[str, list[str]]) -> dict[str, float]:
    """Plain BM25 over the pages' text, chunked by the layout chunker, graded by page."""
    from producers.evaluation.evaluate import Retrieved, evaluate, load_queries
    from producers.retrieval.search import SearchOptions, search
    from workers import lifecycle
    from workers.chunks import layout
    from workers.extraction import cleanup
    from workers.extraction.document import Extracted
    from workers.storage import chunk_index

    collection = f"bench-extract-{name}-{uuid.uuid4().hex[:4]}"
    config = lifecycle.ensure(collection, contextualizer="none")
    try:
        for seq, (doc_id, raw) in enumerate(pages_of.items(), start=1):
            pages, _ = cleanup.remove_running_lines(raw)
            starts, offset = [], 0
            for p in pages:
                starts.append(offset)
                offset += len(p) + 2
            doc = Extracted("\n\n".join(pages), "application/pdf", pages=starts)
            rows = [{"n": c.n, "text": c.text, "start": c.start, "end": c.end, "context": "",
                     "pages": list(c.pages) if c.pages else None, "vector": [1.0] + [0.0] * 383}
                    for c in layout.chunks_of(doc, config.chunk_tokens)]
            chunk_index.write_version(config, doc_id, "v1", seq, rows, {})
        chunk_index.refresh(config)
        queries = load_queries(DATA / "financebench" / "queries.jsonl", "jsonl")
        result = evaluate(queries, lambda q, k: [Retrieved(h.doc_id, h.chunk, h.text, h.pages) for h in
                                                 search(config, q, k=k, options=SearchOptions(mode="bm25"))], "bm25")
        return {"page@10": result.hit_at[10], "doc@10": result.doc_at[10]}
    finally:
        lifecycle.delete(collection)


def bench_extractors(args) -> None:
    import importlib.util

    files = sorted(PDFS.glob("*.pdf"))
    rows = []
    for name, (module, extract) in LIBRARIES.items():
        if importlib.util.find_spec(module) is None:
            print(f"{name}: not installed, skipped", flush=True)
            continue
        cpu, pages_of = time.process_time(), {}
        for path in files:
            pages_of[path.name] = extract(path)
        seconds = time.process_time() - cpu
        pages = sum(len(p) for p in pages_of.values())
        row = {"library": name, "pages": pages, "cpu_s": round(seconds, 1), "pages_per_s": round(pages / seconds, 1),
               **{k: round(v, 2) for k, v in _page_at_10(name, pages_of).items()}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'library':12} {'pages':>6} {'cpu s':>7} {'pages/s':>8} {'BM25 page@10':>13} {'doc@10':>7}")
    for r in rows:
        print(f"{r['library']:12} {r['pages']:6d} {r['cpu_s']:7.1f} {r['pages_per_s']:8.1f} {r['page@10']:13.2f} "
              f"{r['doc@10']:7.2f}")
