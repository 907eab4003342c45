"""Cut a document into chunks: token-aware, and aware of Markdown and source-code structure.

``semantic-text-splitter`` does the cutting (a Rust core: fast, and it prefers the largest
semantic unit that fits — a section, a function — before falling back to sentences and words).
Token counts use the embedder's own WordPiece tokenizer, so a 300-token chunk is ~300 tokens to
the model that embeds it. Code is parsed with tree-sitter; the same grammars give the
structural contextualizer its definition paths (see ``sections``).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from semantic_text_splitter import CodeSplitter, MarkdownSplitter, TextSplitter
from tokenizers import Tokenizer

TOKENIZER_PATH = Path(__file__).parents[1] / "data" / "minilm-tokenizer.json"

EXTENSIONS = {
    ".md": "markdown", ".markdown": "markdown", ".mdx": "markdown", ".rst": "text", ".txt": "text",
    ".py": "python", ".pyi": "python", ".rs": "rust", ".go": "go", ".java": "java",
    ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript", ".jsx": "javascript",
    ".ts": "typescript", ".tsx": "tsx", ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp",
    ".cxx": "cpp", ".hpp": "cpp", ".hh": "cpp",
}


@dataclass(frozen=True)
class Chunk:
    n: int
    text: str
    start: int | None  # character span in the document; None when the producer's chunk
    end: int | None    # could not be located in the text
    # Where it came from, for citations: [first, last] page (1-based) of a paged document, and
    # the heading path in force where it starts ("Item 8 › Consolidated Balance Sheets").
    pages: tuple[int, int] | None = None
    section: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"n": self.n, "text": self.text, "start": self.start, "end": self.end}
        if self.pages:
            out["pages"] = list(self.pages)
        if self.section:
            out["section"] = self.section
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Chunk:
        pages = d.get("pages")
        return cls(d["n"], d["text"], d.get("start"), d.get("end"), tuple(pages) if pages else None, d.get("section"))


@lru_cache(maxsize=1)
def tokenizer() -> Tokenizer:
    tok = Tokenizer.from_file(str(TOKENIZER_PATH))
    tok.no_truncation()
    tok.no_padding()
    return tok


def count_tokens(text: str) -> int:
    return len(tokenizer().encode(text, add_special_tokens=False).ids)


GRAMMARS = ("python", "rust", "go", "java", "javascript", "c", "cpp")  # a package tree_sitter_<name> each


def tree_sitter_language(lang: str) -> Any:
    """The tree-sitter grammar for ``lang`` (a PyCapsule), or None for prose."""
    if lang in ("typescript", "tsx"):
        import tree_sitter_typescript as ts
        return ts.language_tsx() if lang == "tsx" else ts.language_typescript()
    if lang not in GRAMMARS:
        return None
    return importlib.import_module(f"tree_sitter_{lang}").language()


# Cheap signatures for text that arrives without a file name (JSONL, the API, the cookbook).
_SIGNATURES = [
    ("rust", re.compile(r"^\s*(pub(\(crate\))? )?(fn|impl|struct|enum|trait|mod|use) [\w:<{]", re.M),
     re.compile(r"(::|->|&mut |#\[)")),
    ("go", re.compile(r"^package \w+\s*$", re.M), re.compile(r"^func ", re.M)),
    ("java", re.compile(r"^package [\w.]+;", re.M), re.compile(r"\b(class|interface|enum|record) \w+")),
    ("python", re.compile(r"^(def|class|async def) \w+.*:\s*$", re.M), re.compile(r"^(import \w|from [\w.]+ import )", re.M)),
    ("cpp", re.compile(r"^#include [<\"]", re.M), re.compile(r"(std::|template ?<|namespace \w+|class \w+)")),
    ("c", re.compile(r"^#include [<\"]", re.M), re.compile(r"\w+\s*\(.*\)\s*\{")),
    ("typescript", re.compile(r"^(export )?(interface|type) \w+", re.M), re.compile(r":\s*(string|number|boolean)\b")),
    ("javascript", re.compile(r"^(export |import |const |let |function |module\.exports)", re.M),
     re.compile(r"(=>|function\s*\(|require\()")),
    ("markdown", re.compile(r"^#{1,6} \S", re.M), re.compile(r"(^[-*] |\]\(|^```)", re.M)),
]


# A line that reads as code: it ends in a bracket or a semicolon, opens with a keyword or a
# comment, or is mostly symbols.
_CODE_LINE = re.compile(r"[;{}()\[\]]\s*$|^\s*(#include|#define|import |from [\w.]+ import |def |class |fn |func |"
                        r"pub |public |private |protected |static |let |const |var |return\b|if\s*\(|for\s*\(|"
                        r"while\s*\(|@\w+|//|/\*|\*\s|\*/)")
CODE_SHARE = 0.5  # between the shares of such lines in the corpora's source files and in FAQs quoting code


def code_share(text: str) -> float:
    """The share of a document's non-empty lines that read as code."""
    lines = [line for line in text[:20000].splitlines() if line.strip()]
    if not lines:
        return 0.0
    code = 0
    for line in lines:
        stripped = line.strip()
        symbols = sum(1 for ch in stripped if not ch.isalnum() and not ch.isspace())
        code += bool(_CODE_LINE.search(line) or symbols > 0.2 * len(stripped))
    return code / len(lines)


def guess_language(text: str, metadata: dict[str, Any] | None = None) -> str:
    """Language of a document: from its file name when the metadata has one, else by signature
    — for a document that reads as code at all: prose quoting ``use strict;`` or ``Foo::Bar``
    (a Perl FAQ) is prose, not Rust."""
    metadata = metadata or {}
    declared = metadata.get("language")
    if isinstance(declared, str) and (declared in EXTENSIONS.values()):
        return declared
    for key in ("path", "filename", "source", "title"):
        name = metadata.get(key)
        if isinstance(name, str) and Path(name).suffix.lower() in EXTENSIONS:
            return EXTENSIONS[Path(name).suffix.lower()]
    head = text[:20000]
    is_code = code_share(head) >= CODE_SHARE
    for lang, primary, secondary in _SIGNATURES:
        if (is_code or lang == "markdown") and primary.search(head) and secondary.search(head):
            return lang
    return "text"


PROSE = ("markdown", "text")


def is_code(language: str) -> bool:
    return language not in PROSE


@lru_cache(maxsize=64)
def _splitter(lang: str, capacity: int, overlap: int) -> Any:
    tok = tokenizer()
    grammar = tree_sitter_language(lang)
    if grammar is not None:
        return CodeSplitter.from_huggingface_tokenizer(grammar, tok, capacity, overlap)
    if lang == "markdown":
        return MarkdownSplitter.from_huggingface_tokenizer(tok, capacity, overlap)
    return TextSplitter.from_huggingface_tokenizer(tok, capacity, overlap)


def split(text: str, lang: str, chunk_tokens: int, overlap: int) -> list[Chunk]:
    pieces = _splitter(lang, chunk_tokens, overlap).chunk_indices(text)
    return [Chunk(n, piece, start, start + len(piece)) for n, (start, piece) in enumerate(pieces)]


def locate(text: str, given: list[tuple[int, str]]) -> list[Chunk]:
    """Producer-supplied chunks, kept exactly as given; spans found by searching forward."""
    out, cursor = [], 0
    for n, piece in given:
        at = text.find(piece, cursor)
        if at < 0:
            at = text.find(piece)
        if at < 0:
            out.append(Chunk(n, piece, None, None))
        else:
            out.append(Chunk(n, piece, at, at + len(piece)))
            cursor = at + 1
    return out
