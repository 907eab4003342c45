"""The contextualization prompt, in one place: the cookbook's, which Anthropic published with
Contextual Retrieval. A collection may replace the chunk instruction (``prompt``, which must
contain ``{chunk_content}``); the document block never changes, because it is the cached
prefix and must be byte-identical for every chunk of a document.

A collection's glossary (the terms its documents use, as Anthropic suggests for a domain) goes
*before* the document, in a block of its own with a breakpoint after it: the same for every
document of the collection, it is written to the cache once and read by every call after, instead
of being paid on every call after the document (where the instruction is).
"""

from __future__ import annotations

# For open models (``llama``, ``openai``): small ones echo the instruction without a system prompt.
# The same for every call, so it is the first part of every prefix a server caches.
SYSTEM = ("You write one or two sentences that say where the chunk sits in the document and what "
          "it is about. Answer with the sentences only.")

DOCUMENT_BLOCK = "<document>\n{doc_content}\n</document>"

CHUNK_INSTRUCTION = """Here is the chunk we want to situate within the whole document
<chunk>
{chunk_content}
</chunk>

Please give a short succinct context to situate this chunk within the overall document for the purposes of improving search retrieval of the chunk.
Answer only with the succinct context and nothing else."""

# For documents over the model's budget (``contextualizers.windows``): the document's opening,
# then the part of it the chunk is in; each its own cached block, the same for many chunks.
OPENING_BLOCK = ("<document>\n(The document is too long to show whole: here are its opening and the part "
                 "the chunk is in.)\n<opening>\n{opening}\n</opening>\n")
WINDOW_BLOCK = "<part section=\"{title}\">\n{text}\n</part>\n</document>"


GLOSSARY_BLOCK = ("<glossary>\nTerms the documents of this collection use, and what they mean:\n{terms}\n"
                  "</glossary>\n")
MAX_GLOSSARY_CHARS = 60_000


def glossary_block(terms: str | None) -> str:
    """The collection's glossary as its own block ("" when it has none)."""
    return GLOSSARY_BLOCK.format(terms=terms.strip()) if terms and terms.strip() else ""


def check_glossary(terms: str) -> None:
    if len(terms) > MAX_GLOSSARY_CHARS:
        raise ValueError(f"a glossary holds {MAX_GLOSSARY_CHARS:,} characters at most (this one {len(terms):,})")


def document_block(text: str) -> str:
    return DOCUMENT_BLOCK.format(doc_content=text)


def opening_block(text: str) -> str:
    return OPENING_BLOCK.format(opening=text)


def window_block(title: str, text: str) -> str:
    return WINDOW_BLOCK.format(title=title.replace('"', "'"), text=text)


def chunk_instruction(chunk: str, template: str | None = None) -> str:
    return (template or CHUNK_INSTRUCTION).replace("{chunk_content}", chunk)


def check_template(template: str) -> None:
    if "{chunk_content}" not in template:
        raise ValueError("a custom prompt must contain {chunk_content}")
