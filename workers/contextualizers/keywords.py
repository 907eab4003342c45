"""What a whole document is about, in a few words, without a model: its key terms and outline.

A chunk cut from a file loses the words that name the file's subject: the class it belongs
to, the protocol it implements. The ``keywords`` contextualizer gives each chunk those words
back: the chunk's own place (title > enclosing definitions, from ``chunks.sections``), then the
document's key terms, then its outline (the names it defines, or its headings).

Key terms are scored inside the document alone, so a chunk's context never depends on what
else is in the collection or on ingest order: a term counts for how many of the document's
chunks it appears in (spread) times 1 + ln(occurrences). Identifiers are split at case and
underscore changes, so ``HttpHeaderParser`` contributes ``http``, ``header``, ``parser``.

A long extracted document (a 10-K, a manual) is not about one thing: fifteen words for the whole
filing ("company december income net year million cash…") are the same on every chunk and tell
its chunks apart not at all. There half the terms are its *section's* (``section_terms``):
frequent in the section's chunks and rare in the document's other sections, so the notes on debt
say "notes senior maturities", the cash-flow statement "investing purchases equipment".
"""

from __future__ import annotations

import math
import re
from collections import Counter

from workers.chunks import sections
from workers.chunks.splitting import Chunk

KEY_TERMS = 15
OUTLINE_NAMES = 40

_WORD = re.compile(r"[^\W\d_]\w+")
_SEPARATORS = re.compile(r"[\d_]+")

# Function words of the three analyzer languages and the keywords of common programming
# languages: frequent everywhere, they name no subject.
_STOP = set("""
the and for are was were not but this that these those with from into have has had its
their there then than when where which while what who will would can could should may
also any all each other some such only over more most very been being does did you your
our they them his her she him one two use used using get set new via per about out
de la le les des du un une et en est pour que qui dans par sur au aux ce ces pas plus
ou son sa ses avec sont ont être été cette comme mais leur leurs nous vous ils elle
der die das den dem des ein eine einer eines und ist nicht mit von zu im auf für
sich auch als wie bei aus nach oder wird werden sind hat haben dass zum zur kann
self this def class return import from const let var function fn pub mut impl struct
enum trait mod use crate super static void int long short char bool boolean float double
string str true false null none nil public private protected final abstract override
virtual inline extern unsigned signed typedef typename template namespace include define
ifdef ifndef endif else elif case break continue switch default throw throws try catch
except finally raise yield async await lambda package interface extends implements
instanceof sizeof auto begin end then done local export require module exports undefined
""".split())


def parts(word: str) -> list[str]:
    """An identifier's words: split at underscores and digits, then where case changes
    (``parseHTTPHeader`` -> parse, HTTP, Header). Letters are Unicode letters: ``récupération``
    and ``Übergröße`` stay whole (an ASCII-only split cut them at every accent)."""
    out = []
    for piece in _SEPARATORS.split(word):
        start = 0
        for i in range(1, len(piece)):
            before, here, after = piece[i - 1], piece[i], piece[i + 1:i + 2]
            if (before.islower() and here.isupper()) or (before.isupper() and here.isupper() and after.islower()):
                out.append(piece[start:i])
                start = i
        if piece[start:]:
            out.append(piece[start:])
    return out


def terms(text: str) -> list[str]:
    out = []
    for word in _WORD.findall(text):
        for part in parts(word):
            part = part.lower()
            if len(part) > 2 and part not in _STOP:
                out.append(part)
    return out


def key_terms(text: str, chunks: list[Chunk], n: int = KEY_TERMS) -> list[str]:
    """The document's ``n`` key terms, best first (ties: first seen first)."""
    occurrences = Counter(terms(text))
    spread: Counter[str] = Counter()
    for chunk in chunks:
        spread.update(set(terms(chunk.text)))
    score = {t: max(spread[t], 1) * (1 + math.log(c)) for t, c in occurrences.items()}
    return sorted(score, key=lambda t: -score[t])[:n]


def section_terms(chunks: list[Chunk], n: int = KEY_TERMS) -> dict[str, list[str]]:
    """Per section (a chunk's ``section`` path), its ``n`` key terms: occurrences in the section
    times the log of how few of the document's sections hold the term (tf-idf over sections)."""
    counts: dict[str, Counter[str]] = {}
    for chunk in chunks:
        counts.setdefault(chunk.section or "", Counter()).update(terms(chunk.text))
    holding: Counter[str] = Counter()
    for found in counts.values():
        holding.update(found.keys())
    total = len(counts)
    out = {}
    for section, found in counts.items():
        score = {t: (1 + math.log(c)) * math.log(1 + total / holding[t]) for t, c in found.items()}
        out[section] = sorted(score, key=lambda t: -score[t])[:n]
    return out


def outline(text: str, language: str, n: int = OUTLINE_NAMES) -> list[str]:
    """The names a document defines (code) or its headings (Markdown), in order, each once."""
    names = sections.definitions(text, language)
    seen: dict[str, None] = {}
    for name in names:
        seen.setdefault(name, None)
    return list(seen)[:n]
