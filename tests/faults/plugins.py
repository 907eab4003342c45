"""Faults on demand inside the fault tests' workers, loaded through ``SITUATE_PLUGINS`` (the
same way a user adds a contextualizer of their own; a worker imports its plugins at start).

- ``anthropic-crashy`` is the Anthropic contextualizer, except that a document holding
  ``POISON-SEGV`` makes the process running it die with SIGSEGV — what a llama.cpp built for
  the wrong CPU did — before any call is made.
- ``keywords-slow`` is the offline default, after ``SITUATE_TEST_SLOW_S`` seconds per document:
  a task long enough to be stopped in the middle.
- ``SITUATE_TEST_EMBEDDING_FAULTS`` in the environment: the index stage's embedder dies with
  SIGSEGV on a text holding ``POISON-SEGV``, and sleeps ``SITUATE_TEST_SLOW_EMBED_S`` a request.
- ``UNTIDY_BROKER_LOSS`` in the environment: closing a broker connection that ``collect()`` has
  detached raises the ``AttributeError`` Celery 5.7.0 met there (``workers.pipeline.consumer``),
  every time, where on its own it happened to one worker in twelve in the failover test."""

from __future__ import annotations

import os
import signal
import time

from workers.contextualizers import registry

MARKER = "POISON-SEGV"
UNTIDY_BROKER_LOSS = "SITUATE_TEST_UNTIDY_BROKER_LOSS"


class CrashOnMarker:
    def __init__(self, inner):
        self.inner, self.name = inner, "anthropic-crashy"

    def contextualize(self, doc, chunks):
        if MARKER in doc.text:
            os.kill(os.getpid(), signal.SIGSEGV)
        yield from self.inner.contextualize(doc, chunks)


def _crashy(config):
    from workers.contextualizers.llm.scheduler import anthropic_contextualizer

    return CrashOnMarker(anthropic_contextualizer(config.model_copy(update={"contextualizer": "anthropic"})))


registry.register("anthropic-crashy", _crashy, model_written=True)


class SlowKeywords:
    def __init__(self, inner):
        self.inner, self.name = inner, "keywords-slow"

    def contextualize(self, doc, chunks):
        time.sleep(float(os.environ.get("SITUATE_TEST_SLOW_S", "0")))
        yield from self.inner.contextualize(doc, chunks)


def _slow(config):
    from workers.contextualizers.offline import KeywordContext

    return SlowKeywords(KeywordContext(config.embed_header))


registry.register("keywords-slow", _slow)


def _untidy_broker_loss() -> None:
    from kombu.connection import Connection

    close = Connection.release

    def release(self: Connection) -> None:
        if self._transport is None and self._default_channel is not None:  # collect() detached it
            raise AttributeError("'NoneType' object has no attribute 'hostname'")
        close(self)

    Connection.release = Connection.close = release


def _embedding_faults() -> None:
    """The index stage's embedder, slowed by ``SITUATE_TEST_SLOW_EMBED_S`` a request, and killing
    its process (SIGSEGV) on a text that holds ``POISON-SEGV``: a bundle's poison document."""
    from workers.embedding import registry as embedders

    real = embedders.get

    class Faulty:
        def __init__(self, inner):
            self.inner = inner
            self.name, self.dimension = inner.name, inner.dimension

        def embed_documents(self, texts):
            time.sleep(float(os.environ.get(SLOW_EMBED, "0")))
            if any(MARKER in t for t in texts):
                os.kill(os.getpid(), signal.SIGSEGV)
            return self.inner.embed_documents(texts)

        def embed_query(self, text):
            return self.inner.embed_query(text)

    embedders.get = lambda name, model="": Faulty(real(name, model))


SLOW_EMBED = "SITUATE_TEST_SLOW_EMBED_S"
EMBEDDING_FAULTS = "SITUATE_TEST_EMBEDDING_FAULTS"
if os.environ.get(EMBEDDING_FAULTS):
    _embedding_faults()
if os.environ.get(UNTIDY_BROKER_LOSS):
    _untidy_broker_loss()
