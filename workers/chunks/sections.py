"""Where a chunk sits in its document, read from structure alone: no model, no cost.

The "title and heading prefix" technique: a chunk of Markdown gets its heading path, a chunk of
code gets its enclosing definitions (namespace > class > method) from the tree-sitter parse.
This is what the offline ``structural`` contextualizer writes; it is also cheap enough to be a
hint inside an LLM prompt.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from workers.chunks.splitting import Chunk, tree_sitter_language

# Node types that open a named scope, across the grammars we ship.
SCOPES = {
    "function_definition", "class_definition", "decorated_definition",          # python, c, cpp
    "function_item", "impl_item", "struct_item", "enum_item", "trait_item", "mod_item",  # rust
    "function_declaration", "method_declaration", "type_declaration",           # go, java, js
    "class_declaration", "interface_declaration", "enum_declaration", "record_declaration",
    "constructor_declaration", "method_definition", "class_specifier", "struct_specifier",
    "namespace_definition", "template_declaration", "abstract_class_declaration",
}
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


@lru_cache(maxsize=16)
def _parser(lang: str) -> Any:
    from tree_sitter import Language, Parser

    grammar = tree_sitter_language(lang)
    return None if grammar is None else Parser(Language(grammar))


def _scope_name(node: Any) -> str | None:
    if node.type == "decorated_definition" or node.type == "template_declaration":
        return None  # the inner definition is the scope that counts
    if node.type == "impl_item":
        trait, typ = node.child_by_field_name("trait"), node.child_by_field_name("type")
        if typ is None:
            return None
        return f"impl {trait.text.decode()} for {typ.text.decode()}" if trait else f"impl {typ.text.decode()}"
    name = node.child_by_field_name("name")
    if name is None:
        declarator = node.child_by_field_name("declarator")
        while declarator is not None and declarator.child_by_field_name("declarator") is not None:
            declarator = declarator.child_by_field_name("declarator")
        name = declarator
    if name is None:
        return None
    kind = node.type.split("_")[0]
    text = name.text.decode(errors="replace").split("(")[0].strip()
    return f"{kind} {text}" if text else None


_COMMENT = re.compile(r"^\s*(/\*+|\*+/?|//+!?|#+!?|--|;+)?")


def _comment_marker(line: str) -> str | None:
    """The comment marker a line starts with, if any."""
    found = _COMMENT.match(line)
    return found.group(1) if found else None
_BOILERPLATE = re.compile(r"copyright|licen[cs]e|spdx|all rights reserved|warrant|redistribut", re.I)


def title_of(text: str, metadata: dict[str, Any]) -> str:
    """A name for the document: its declared title or path, else its first meaningful line
    (a module doc comment, a heading, a package line), skipping license boilerplate."""
    for key in ("title", "path", "filename", "source"):
        value = metadata.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    lines = text.splitlines()
    # A leading comment block that mentions a license is boilerplate: skip all of it.
    block_end = 0
    while block_end < len(lines) and (not lines[block_end].strip() or _comment_marker(lines[block_end])):
        block_end += 1
    skip = block_end if _BOILERPLATE.search("\n".join(lines[:block_end])) else 0
    for line in lines[skip:]:
        stripped = _COMMENT.sub("", line, count=1).strip().rstrip("*/ ").strip()
        if len(stripped) >= 3 and not _BOILERPLATE.search(stripped) and not set(stripped) <= set("=-#*/ "):
            return stripped[:120]
    return ""


def code_paths(text: str, lang: str, chunks: list[Chunk]) -> list[list[str]]:
    """For each chunk, the names of the definitions enclosing its first character."""
    parser = _parser(lang)
    if parser is None:
        return [[] for _ in chunks]
    data = text.encode("utf-8")
    tree = parser.parse(data)
    # char offset -> byte offset, computed incrementally over the sorted chunk starts
    out: list[list[str]] = []
    for chunk in chunks:
        if chunk.start is None:
            out.append([])
            continue
        at = len(text[: chunk.start].encode("utf-8"))
        end = len(text[: chunk.end].encode("utf-8")) if chunk.end else at + 1
        node = tree.root_node.descendant_for_byte_range(at, max(at, end - 1))
        path = []
        while node is not None:
            if node.type in SCOPES and node.start_byte < at:
                name = _scope_name(node)
                if name:
                    path.append(name)
            node = node.parent
        out.append(list(reversed(path)))
    return out


def markdown_paths(text: str, chunks: list[Chunk]) -> list[list[str]]:
    """The heading path each chunk starts under (none for a chunk not located in the text). One
    walk over the headings for all the chunks, in the order of their starts: a long document's
    thousands of headings are not read again for each of its chunks."""
    headings = [(m.start(), len(m.group(1)), m.group(2)) for m in _HEADING.finditer(text)]
    out: list[list[str]] = [[] for _ in chunks]
    stack: list[tuple[int, str]] = []
    next_heading = 0
    located = sorted((c.start, i) for i, c in enumerate(chunks) if c.start is not None)
    for start, i in located:
        while next_heading < len(headings) and headings[next_heading][0] <= start:
            _, level, title = headings[next_heading]
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            next_heading += 1
        out[i] = [t for _, t in stack]
    return out


def definitions(text: str, lang: str) -> list[str]:
    """Every named definition of a code document (bare names, in order), or the headings of
    a Markdown one: its table of contents."""
    if lang == "markdown":
        return [m.group(2) for m in _HEADING.finditer(text)]
    parser = _parser(lang)
    if parser is None:
        return []
    names, stack = [], [parser.parse(text.encode("utf-8")).root_node]
    while stack:
        node = stack.pop()
        if node.type in SCOPES:
            name = _scope_name(node)
            if name:
                names.append((node.start_byte, name.split(" ")[-1]))
        stack.extend(node.children)
    return [name for _, name in sorted(names)]


def paths(text: str, lang: str, chunks: list[Chunk]) -> list[list[str]]:
    if lang == "markdown":
        return markdown_paths(text, chunks)
    return code_paths(text, lang, chunks)
