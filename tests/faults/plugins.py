"""A contextualizer that kills its own process on a marker: a native crash, on demand.

Loaded by the fault tests' workers through ``SITUATE_PLUGINS`` (the same way a user adds a
contextualizer of their own). ``anthropic-crashy`` is the Anthropic contextualizer, except that
a document holding ``POISON-SEGV`` makes the process running it die with SIGSEGV — what a
llama.cpp built for the wrong CPU did — before any call is made."""

from __future__ import annotations

import os
import signal

from workers.contextualizers import registry

MARKER = "POISON-SEGV"


class CrashOnMarker:
    def __init__(self, inner):
        self.inner, self.name = inner, "anthropic-crashy"

    def contextualize(self, doc, chunks):
        if MARKER in doc.text:
            os.kill(os.getpid(), signal.SIGSEGV)
        yield from self.inner.contextualize(doc, chunks)


def _crashy(config):
    from workers.contextualizers.claude.scheduler import anthropic_contextualizer

    return CrashOnMarker(anthropic_contextualizer(config.model_copy(update={"contextualizer": "anthropic"})))


registry.register("anthropic-crashy", _crashy, model_written=True)
