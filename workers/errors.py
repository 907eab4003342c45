"""Every error situate raises on purpose, in one tree.

``PublicError`` is the line that matters: its message was written for the user, so it is stored
in a document's state, printed by the CLI and returned by the API as is. Any other exception is
reported by its type only, because its text may hold internals (a URL with a key, a path, a
query). The second base of each class (``ValueError``, ``RuntimeError``) says what kind of
mistake it is, so callers that only know the standard library still catch it sensibly.

``ProviderFault`` is the one error here that is not public: a retryable answer from a paid API,
caught by the scheduler and never shown. ``producers.web.http_guard.BodyTooLarge`` stays beside the
HTTP code: it is an HTTP response (a Starlette exception), and this module imports nothing.
"""

from __future__ import annotations


class PublicError(Exception):
    """An error whose message was written for the user: it is stored and shown as is."""


class ConfigurationError(PublicError, RuntimeError):
    """A setting that cannot work as given (the commands print it, without a traceback)."""


# Documents and files
class BadDocument(PublicError, ValueError):
    """A document that can never be indexed as given."""


class ExtractionError(PublicError):
    """A file that cannot be turned into text: the message says why."""


class Unsupported(ExtractionError, ValueError):
    """A format no extractor reads: the message says which, and what to do."""


# Collections
class CollectionError(PublicError, ValueError):
    """A collection's settings conflict with what is asked, or are not allowed. ``http_status``:
    what the API and the pages answer with, one table for both."""

    http_status = 422


class NoSuchCollection(CollectionError):
    """No collection by that name (or it is being dropped)."""

    http_status = 404


class BadName(CollectionError):
    """A collection name outside ``[a-z0-9][a-z0-9_-]{0,62}``."""


class Conflict(CollectionError):
    """Asked for other settings than the collection was created with."""

    http_status = 409


class NotAllowed(CollectionError):
    """Settings the deployment does not allow (``SITUATE_ALLOWED_*``)."""

    http_status = 403


# The index
class WriteRefused(PublicError, RuntimeError):
    """OpenSearch refused some of a document's chunks, for good (a mapping error, say)."""


class WriteNotNow(WriteRefused):
    """OpenSearch said "not now" (429, 5xx, a write block): the same write may be tried again."""


class StoreFull(PublicError, RuntimeError):
    """Redis has no room now for what a stage is about to write: the stage waits and tries again."""


# Contextualizers
class LLMError(PublicError, RuntimeError):
    """A chunk that cannot be situated (after retries, or a permanent refusal)."""


class LocalLLMError(LLMError):
    """The local GGUF model cannot run here (missing file, a build for another CPU)."""


class PluginError(ConfigurationError):
    """A module named in ``SITUATE_PLUGINS`` that cannot be imported: its name and the cause."""


class ProviderFault(Exception):
    """A transient fault of a call out of the process (``workers.faults``): ``kind`` is
    connection, timeout, http_408, http_429, http_529 or http_5xx. Not public: it is retried."""

    def __init__(self, kind: str, retry_after: float | None = None, detail: str = ""):
        super().__init__(f"{kind}: {detail}"[:300])
        self.kind, self.retry_after = kind, retry_after


class ProviderRefused(PublicError, RuntimeError):
    """A paid API or S3 refused a request for good (a bad input, a missing model, a wrong key):
    its own message. Asking again would be paying again for the same answer."""

    http_status = 502


class ProviderUnavailable(PublicError, RuntimeError):
    """A paid API or S3 kept failing transiently past the patience of one call (``workers.faults``):
    the document fails with this reason; what was paid for is checkpointed (``situate retry``)."""

    http_status = 503


# Producers
class Denied(PublicError):
    """A caller without the right to what it asked; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Busy(PublicError, RuntimeError):
    """Not now, for seconds: the collection is switching to its new generation (a reindex), or
    the pipeline's backlog is full (``BacklogFull``)."""


class BacklogFull(Busy):
    """The documents in flight weigh ``SITUATE_BACKLOG_MB``: the next waits where it is (its
    source) until the workers have made room."""


class QueryFileError(PublicError, ValueError):
    """A labelled query file that cannot be read as the format it was named."""


def failure_reason(stage: str, exc: BaseException, task_id: str | None) -> str:
    """What a document failed by ``exc`` in ``stage`` says in its state: a ``PublicError``'s own
    words, anything else by its type, pointing at the worker log's full account."""
    if isinstance(exc, BadDocument):
        return str(exc)
    if isinstance(exc, PublicError):
        return f"{stage} failed: {exc}"
    return f"{stage} failed: internal error ({type(exc).__name__}); the worker log has it under task {task_id}"
