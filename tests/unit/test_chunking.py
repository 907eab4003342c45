"""Chunking (token-aware, structure-aware) and the structural paths offline contexts are made of."""

from __future__ import annotations

from workers.chunks import sections
from workers.chunks.splitting import count_tokens, guess_language, locate, split


def test_markdown_chunks_follow_headings_and_respect_size():
    text = "\n\n".join(f"# Part {i}\n\n" + " ".join(f"word{i}_{j}" for j in range(60)) for i in range(6))
    chunks = split(text, "markdown", 80, 0)
    assert len(chunks) >= 6
    assert all(count_tokens(c.text) <= 80 for c in chunks)
    assert all(text[c.start:c.end] == c.text for c in chunks)
    assert sum(c.text.startswith("# Part") for c in chunks) == 6  # every section starts a chunk


def test_code_chunks_keep_functions_whole():
    funcs = [f"def f{i}(x):\n" + "\n".join(f"    x = x + {j}  # step {j}" for j in range(8)) + "\n    return x\n"
             for i in range(10)]
    text = "\n\n".join(funcs)
    assert guess_language(text, {"path": "m.py"}) == "python"
    chunks = split(text, "python", 120, 0)
    for c in chunks:
        assert c.text.count("def ") == c.text.count("return x"), "a function was cut in two"


def test_overlap_makes_neighbours_share_text():
    text = " ".join(f"token{i}" for i in range(400))
    chunks = split(text, "text", 60, 20)
    assert len(chunks) >= 5, "400 tokens in chunks of 60 make several chunks"
    assert all(a.end > b.start for a, b in zip(chunks, chunks[1:]))


def test_prechunked_input_kept_exactly():
    text = "alpha beta gamma. alpha beta gamma."
    chunks = locate(text, [(5, "alpha beta gamma."), (9, "alpha beta gamma."), (11, "not in text")])
    assert [(c.n, c.text, c.start) for c in chunks] == [(5, "alpha beta gamma.", 0), (9, "alpha beta gamma.", 18),
                                                        (11, "not in text", None)]


def test_structural_paths_for_code_and_markdown():
    code = "class Store:\n    def put(self, key):\n        a = 1\n        return a\n"
    start = code.index("a = 1")
    chunk = locate(code, [(0, code[start:])])
    assert sections.code_paths(code, "python", chunk) == [["class Store", "function put"]]
    md = "# Guide\n\n## Install\n\nRun it.\n\n## Use\n\nCall it.\n"
    chunks = locate(md, [(0, "Run it."), (1, "Call it.")])
    assert sections.markdown_paths(md, chunks) == [["Guide", "Install"], ["Guide", "Use"]]
    assert sections.title_of("/* Copyright 2020 X\n * Licensed MIT */\npackage a.b;\n", {}) == "package a.b;"


def test_key_terms_keep_accented_words_whole_and_split_identifiers():
    from workers.contextualizers.keywords import parts, terms

    assert terms("La récupération des paquets Übergrößenträger naïveté") == [
        "récupération", "paquets", "übergrößenträger", "naïveté"]
    assert parts("parseHTTPHeader") == ["parse", "HTTP", "Header"]
    assert parts("XMLHttpRequest") == ["XML", "Http", "Request"]
    assert parts("snake_case2name") == ["snake", "case", "name"]


def test_prose_that_quotes_code_is_prose_and_code_is_code():
    perl_faq = ("How do I read a file by paragraphs?\n\nUse the special variable $/ to set the input record "
                "separator. For example:\n\n    use strict;\n    local $/ = '';\n\nThe Foo::Bar module "
                "does it for you, and the manual explains why in detail.\n") * 3
    assert guess_language(perl_faq) == "text"
    rust = "use std::io;\n\npub fn main() -> io::Result<()> {\n    let x = 1;\n    println!(\"{}\", x);\n    Ok(())\n}\n"
    assert guess_language(rust) == "rust"
    assert guess_language("# Guide\n\n- one\n- [two](x)\n\nSome prose here.\n") == "markdown"
