"""The contextualization prompt, in one place: the cookbook's, which Anthropic published with
Contextual Retrieval. A collection may replace the chunk instruction (``prompt``, which must
contain ``{chunk_content}``); the document block never changes, because it is the cached
prefix and must be byte-identical for every chunk of a document.
"""

from __future__ import annotations

DOCUMENT_BLOCK = "<document>\n{doc_content}\n</document>"

CHUNK_INSTRUCTION = """Here is the chunk we want to situate within the whole document
<chunk>
{chunk_content}
</chunk>

Please give a short succinct context to situate this chunk within the overall document for the purposes of improving search retrieval of the chunk.
Answer only with the succinct context and nothing else."""

# For documents over the model's budget: the first chunks stand for the document (cached),
# then the chunks just before the one to situate (not cached: they differ per chunk).
PARTIAL_DOCUMENT_BLOCK = (
    "<document>\n{doc_content}\n</document>\n"
    "(The document is longer than shown: this is its beginning.)"
)
PRECEDING_BLOCK = "The text just before the chunk:\n<preceding>\n{preceding}\n</preceding>"


def document_block(text: str, partial: bool = False) -> str:
    return (PARTIAL_DOCUMENT_BLOCK if partial else DOCUMENT_BLOCK).format(doc_content=text)


def chunk_instruction(chunk: str, template: str | None = None) -> str:
    return (template or CHUNK_INSTRUCTION).replace("{chunk_content}", chunk)


def check_template(template: str) -> None:
    if "{chunk_content}" not in template:
        raise ValueError("a custom prompt must contain {chunk_content}")
