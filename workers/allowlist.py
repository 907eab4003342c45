"""What a deployment lets its callers choose: contextualizers (and their models), embedders and
rerankers. The paid ones beyond the defaults are the operator's choice, not a caller's: a
collection admin must not be able to point a collection at a costlier model or embedder, nor a
reader to send 150 candidates a query to a paid reranker.

Each list is comma-separated ``name`` or ``name:model`` entries, ``name:*`` for any model of
it, ``*`` for anything. The operator's own defaults (``SITUATE_EMBEDDER``, ``SITUATE_RERANKER``)
are always allowed. A refusal is ``NotAllowed`` (the API answers 403), before anything is tried.
"""

from __future__ import annotations

from workers.errors import NotAllowed
from workers.settings import get_settings


def _rules(setting: str) -> list[str]:
    return [a.strip() for a in setting.split(",") if a.strip()]


def _allowed(rules: list[str], name: str, model: str) -> bool:
    wanted = f"{name}:{model}" if model else name
    return any(rule in ("*", wanted, name, f"{name}:*") for rule in rules)


def contextualizer_rules() -> list[str]:
    """``SITUATE_ALLOWED_MODELS``; where it is not set and ``SITUATE_OPENAI_BASE_URLS`` is, the
    operator has configured servers of their own: any model of theirs is allowed too."""
    s = get_settings()
    rules = _rules(s.allowed_models)
    if "allowed_models" not in s.model_fields_set and s.openai_base_urls.strip():
        rules.append("openai:*")
    return rules


def check_contextualizer(contextualizer: str, model: str, has_models: bool) -> None:
    """``SITUATE_ALLOWED_MODELS``; ``has_models``: the contextualizer takes a model (an LLM)."""
    rules = contextualizer_rules()
    if not _allowed(rules, contextualizer, model if has_models else ""):
        wanted = f"{contextualizer}:{model}" if model and has_models else contextualizer
        raise NotAllowed(f"{wanted!r} is not allowed here (SITUATE_ALLOWED_MODELS: {', '.join(rules)}); "
                         "the operator can allow it")


def check_embedder(embedder: str, model: str = "") -> None:
    s = get_settings()
    if embedder == s.embedder and model == s.embed_model:
        return
    rules = _rules(s.allowed_embedders)
    if not _allowed(rules, embedder, model):
        raise NotAllowed(f"embedder {embedder + (':' + model if model else '')!r} is not allowed here "
                         f"(SITUATE_ALLOWED_EMBEDDERS: {', '.join(rules)}); the operator can allow it")


def check_reranker(reranker: str) -> None:
    s = get_settings()
    if reranker == s.reranker:
        return
    rules = _rules(s.allowed_rerankers)
    if not _allowed(rules, reranker, ""):
        raise NotAllowed(f"reranker {reranker!r} is not allowed here (SITUATE_ALLOWED_RERANKERS: "
                         f"{', '.join(rules)}); the operator can allow it")
