"""Which replica of your own LLM servers answers a call: the one that holds its document's prefix.

A self-hosted server (vLLM, SGLang, llama.cpp, Ollama, TGI) keeps its prefix (KV) cache inside
each replica. Sent round robin to four replicas, a document's prefix is computed up to four
times; sent to one, once. So each document is given one replica, chosen by rendezvous hashing
over the replicas that are up: every replica scores the document, the highest score wins. Adding
or losing one of N replicas moves only the documents it wins or won, about 1/N, without a ring
to rebuild (consistent hashing does the same with more state).

Load bounds the affinity, as SGLang's cache-aware router and AIBrix do. A new document has
nothing cached anywhere yet, so it takes the first replica in its order with a free slot; when all
are full, it skips its first choice if that replica has ``SITUATE_OPENAI_IMBALANCE`` more calls in
flight than the least busy one, and takes the next in its order. Without the free-slot rule a few
long documents could all hash to one replica and queue there while another idled, since a margin
counted in calls is never reached by documents that make one call at a time. A document under way
stays where it is unless its replica goes down. Each replica has
``SITUATE_OPENAI_REPLICA_CONCURRENCY`` slots for the whole fleet; calls beyond wait their turn here,
not in the server's queue, so the counts that the imbalance rule reads are the fleet's, not one
process's.

A replica that refuses a connection or times out is left alone for ``SITUATE_OPENAI_DOWN_S``
(doubled for each failure in a row), its documents move on their next call and each move is
counted; then one worker probes it (``GET /models``) and a success brings it back.

``round-robin`` and ``least-loaded`` route each call without affinity: the references the
affinity is measured against (``ops/bench replicas``), and a choice for one-chunk documents.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from workers import metrics
from workers.errors import ConfigurationError, ProviderFault
from workers.settings import get_credentials, get_settings
from workers.storage import replicas as store

log = logging.getLogger("situate.replicas")

KEEP_S = 3600          # how long a document's replica is remembered after its last call
MOST_DOWN_S = 600      # the longest a replica is left alone before the next probe
PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Replica:
    url: str    # the base URL, ending in /v1
    label: str  # the same without credentials: what logs, metrics and Redis name it by


def parse(setting: str) -> list[Replica]:
    """``SITUATE_OPENAI_BASE_URLS``: comma-separated base URLs, each ending in ``/v1``."""
    found: list[Replica] = []
    for raw in (u.strip().rstrip("/") for u in setting.split(",")):
        if not raw:
            continue
        parts = urlsplit(raw)
        if parts.scheme not in ("http", "https") or not parts.hostname or not parts.path.endswith("/v1"):
            raise ConfigurationError(f"SITUATE_OPENAI_BASE_URLS: {label_of(raw)!r} is not a base URL ending in /v1 "
                                     "(such as http://10.0.0.5:8000/v1)")
        found.append(Replica(raw, label_of(raw)))
    if len({r.label for r in found}) != len(found):
        raise ConfigurationError("SITUATE_OPENAI_BASE_URLS names a replica twice")
    return found


def label_of(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    return urlunsplit((parts.scheme, f"{host}:{parts.port}" if parts.port else host, parts.path, "", ""))


def rank(document: str, replicas: list[Replica]) -> list[int]:
    """The replicas in ``document``'s order of preference (rendezvous: highest score first)."""
    def score(i: int) -> bytes:
        return hashlib.blake2b(f"{document}\x00{replicas[i].label}".encode(), digest_size=8).digest()

    return sorted(range(len(replicas)), key=score, reverse=True)


class Router:
    """Places calls on replicas for one worker process (the state is the fleet's, in Redis)."""

    def __init__(self, replicas: list[Replica]):
        if not replicas:
            raise ConfigurationError("the openai contextualizer needs SITUATE_OPENAI_BASE_URLS on the workers: "
                                     "your servers' base URLs, comma-separated, each ending in /v1")
        self.replicas = replicas
        store.announce([r.label for r in replicas])

    @contextlib.contextmanager
    def slot(self, document: str) -> Iterator[Replica]:
        """A slot on ``document``'s replica for one call, held while the block runs."""
        s = get_settings()
        order = rank(document, self.replicas)
        labels = [self.replicas[i].label for i in order]
        call, held, pause = uuid.uuid4().hex, -1, 0.01
        while True:
            place = store.take(document, labels, call, slots=s.openai_replica_concurrency, margin=s.openai_imbalance,
                               lease_s=s.llm_timeout_s + 60, keep_s=KEEP_S, routing=s.openai_routing, held=held)
            if place.moved_from:
                log.warning("document %s moved from replica %s to %s", document, place.moved_from, labels[place.replica])
                metrics.count("llm_replica_moves", 1, replica=place.moved_from)
            if place.replica < 0:
                if self.probe():  # every replica is down: the ones due are probed now, not at the next heartbeat
                    continue
                raise ProviderFault("connection", s.openai_down_s / 2, "every replica in SITUATE_OPENAI_BASE_URLS is down")
            held = place.replica
            if place.slot:
                break
            time.sleep(pause)  # its replica's slots are all taken: its turn comes when one is given back
            pause = min(0.25, pause * 1.5)
        replica = self.replicas[order[place.replica]]
        try:
            yield replica
        finally:
            store.give_back(replica.label, call)

    def failed(self, replica: Replica, fault: ProviderFault) -> None:
        """A call's fault: a replica that refused the connection or timed out is left alone."""
        if fault.kind in ("connection", "timeout"):
            seconds = store.mark_down(replica.label, get_settings().openai_down_s, MOST_DOWN_S)
            if seconds:
                log.warning("replica %s is down (%s): left alone %.0f s, its documents move", replica.label,
                            fault.kind, seconds)
                metrics.count("llm_replica_down", 1, replica=replica.label)

    def probe(self) -> int:
        """Probe the replicas due for it (each by one worker); returns how many came back."""
        by_label = {r.label: r for r in self.replicas}
        back = 0
        for label in store.due_for_probe(claim_s=PROBE_TIMEOUT_S * 3):
            replica = by_label.get(label)
            if replica is None:  # another worker's replica: its own workers probe it
                continue
            key = get_credentials().openai_api_key
            try:
                ok = httpx.get(f"{replica.url}/models", timeout=PROBE_TIMEOUT_S,
                               headers={"Authorization": f"Bearer {key}"} if key else {}).status_code < 500
            except httpx.HTTPError:
                ok = False
            if ok:
                store.back_up(label)
                log.warning("replica %s answers again: back in the routing", label)
                back += 1
            else:
                store.mark_down(label, get_settings().openai_down_s, MOST_DOWN_S)
        return back


_router: Router | None = None


def router() -> Router:
    """This process's router, over ``SITUATE_OPENAI_BASE_URLS``."""
    global _router
    if _router is None:
        _router = Router(parse(get_settings().openai_base_urls))
    return _router


def probe_due() -> None:
    """The heartbeat's duty on a worker that routes to replicas: bring back those that answer."""
    if get_settings().openai_base_urls:
        router().probe()
