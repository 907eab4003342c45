"""``llama``: contexts from a local GGUF model through llama-cpp-python (optional extra
``situate[llama]``), no API, no key.

The local twin of prompt caching: llama.cpp keeps the KV cache of the last prompt and reuses
its longest common token prefix. With the document first and the chunk last, every chunk of a
document after the first only pays for its own tokens — provided the chunks of one document
run in order, in one process, with nothing in between. That is exactly what a situate task
is (one document, one queue), so each worker process holds one model and one lock.

A document over the context window is cut to a fixed head (not a window per chunk), so the
prefix stays the same for all its chunks and stays reusable.

The model file is the collection's ``model`` (a file name or path inside ``SITUATE_MODELS_DIR``,
the same on every worker) or ``SITUATE_LLAMA_MODEL``. Nothing is downloaded.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workers.chunks.splitting import Chunk
from workers.contextualizers import prompts
from workers.contextualizers.base import Context, SourceDocument
from workers.errors import LocalLLMError
from workers.settings import get_settings
from workers.storage.catalog import CollectionConfig

SYSTEM = prompts.SYSTEM
PROMPT_OVERHEAD_TOKENS = 64  # the chat template's role markers around the messages

_models: dict[str, Any] = {}
_lock = threading.Lock()  # one generation at a time per process: the KV cache is per model


def model_path(config: CollectionConfig) -> Path:
    """The GGUF file, which must lie in ``SITUATE_MODELS_DIR`` (else the installation's folder of
    packaged models, ``gguf``; a name is looked up there): a caller names a model, never an
    arbitrary file of the worker's disk. Unnamed: the packaged default."""
    from workers.contextualizers import gguf

    s = get_settings()
    folder = gguf.folder().resolve()
    name = config.model or s.llama_model or gguf.PACKAGED[gguf.DEFAULT].file
    path = (folder / Path(name).expanduser()).resolve()
    if folder not in path.parents:
        raise LocalLLMError(f"llama contextualizer: {name!r} is not in SITUATE_MODELS_DIR")
    if not path.is_file() or path.suffix.lower() != ".gguf":
        raise LocalLLMError(f"llama contextualizer: no GGUF model file {name!r} in {folder} (SITUATE_MODELS_DIR; "
                            f"`situate models fetch --gguf {gguf.DEFAULT}` puts a packaged one there)")
    return path


# A llama.cpp tuned to an AMX CPU (GGML_NATIVE, pip's default build there) segfaulted on
# document-sized prompts on a machine here, killing the worker; AVX-512 without AMX and the
# AVX2 baseline ran the same prompt. Refused with the remedy rather than crash a worker.
REBUILD = ('CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir --force-reinstall --no-deps '
           '"llama-cpp-python==0.3.36"')


def check_build(system_info: str) -> None:
    if "AMX_INT8 = 1" in system_info and not get_settings().llama_allow_amx:
        raise LocalLLMError("this llama.cpp was built with AMX for the CPU it was compiled on; such builds "
                            f"crashed on document-sized prompts. Rebuild it: {REBUILD} "
                            "(or set SITUATE_LLAMA_ALLOW_AMX=1 if yours does not crash)")


def _load(path: Path) -> Any:
    try:
        import llama_cpp
        from llama_cpp import Llama
    except ImportError:
        raise LocalLLMError("the llama contextualizer needs the optional extra: pip install 'situate[llama]' "
                            f"(built for any x86-64 CPU: {REBUILD})") from None
    check_build(llama_cpp.llama_print_system_info().decode(errors="replace"))
    key = str(path.resolve())
    if key not in _models:
        s = get_settings()
        _models[key] = Llama(key, n_ctx=s.llama_n_ctx, n_threads=s.llama_threads or None, seed=0, verbose=False)
    return _models[key]


def loaded(path: Path) -> Any:
    """The model in this process (loaded once), for a caller of its own: question generation."""
    with _lock:
        return _load(path)


class LlamaContextualizer:
    name = "llama"

    def __init__(self, config: CollectionConfig):
        self.config = config
        self.path = model_path(config)

    def _messages(self, document: str, chunk: Chunk) -> list[dict[str, str]]:
        user = (prompts.glossary_block(self.config.glossary) + prompts.document_block(document) + "\n"
                + prompts.chunk_instruction(chunk.text, self.config.prompt))
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]

    def _document(self, model: Any, doc: SourceDocument, chunks: list[Chunk]) -> str:
        """The document as the model will see it: whole, or its head cut to fit the window
        beside the longest chunk, the prompt and the answer (counted with the model's own
        tokenizer, the only count llama.cpp will agree with)."""
        s = get_settings()

        def count(text: str) -> int:
            return len(model.tokenize(text.encode("utf-8"), add_bos=False))

        fixed = count(SYSTEM) + count(self._messages("", max(chunks, key=lambda c: len(c.text)))[1]["content"])
        budget = s.llama_n_ctx - s.llm_max_output_tokens - fixed - PROMPT_OVERHEAD_TOKENS
        if budget < 256:
            raise LocalLLMError(f"llama contextualizer: a chunk leaves no room for its document in a "
                                f"{s.llama_n_ctx}-token window (SITUATE_LLAMA_N_CTX)")
        tokens = model.tokenize(doc.text.encode("utf-8"), add_bos=False)
        if len(tokens) <= budget:
            return doc.text
        return model.detokenize(tokens[:budget]).decode("utf-8", errors="ignore")

    def contextualize(self, doc: SourceDocument, chunks: list[Chunk]) -> Iterator[tuple[Chunk, Context]]:
        s = get_settings()
        if not chunks:
            return
        with _lock:
            model = _load(self.path)
            document = self._document(model, doc, chunks)
            for chunk in sorted(chunks, key=lambda c: c.n):  # in order: each reuses the last prefix
                started = time.monotonic()
                answer = model.create_chat_completion(self._messages(document, chunk),
                                                      max_tokens=s.llm_max_output_tokens, temperature=0.0)
                text = " ".join((answer["choices"][0]["message"].get("content") or "").split())
                if not text:
                    raise LocalLLMError(f"chunk {chunk.n}: the local model returned an empty context")
                used = answer.get("usage") or {}
                yield chunk, Context(text[: s.llm_max_context_chars], {
                    "model": f"llama:{self.path.name}", "input_tokens": used.get("prompt_tokens", 0),
                    "output_tokens": used.get("completion_tokens", 0), "cost_usd": 0.0,
                    "latency_ms": round((time.monotonic() - started) * 1000),
                    "document_cut": len(document) < len(doc.text)})
