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
counted in calls is never reached by documents that make one call at a time. Each replica has
``SITUATE_OPENAI_REPLICA_CONCURRENCY`` slots for the whole fleet; calls beyond wait in the
replica's line in Redis, first come first served, woken when a slot is given back — here, not in
the server's queue, so the counts that the imbalance rule reads are the fleet's, not one process's.
A document under way stays where it is unless its replica goes down, or one of its calls waited
``SITUATE_OPENAI_WAIT_S`` while another replica had a free slot: recomputing its prefix once there
costs less than a replica idling while another's line grows.

A replica that refuses a connection or times out is left alone for ``SITUATE_OPENAI_DOWN_S``
(doubled for each failure in a row), its documents move on their next call and each move is
counted; then one worker probes it (``GET /models``) and a success brings it back.

``round-robin`` and ``least-loaded`` route each call without affinity: the references the
affinity is measured against (``ops/bench replicas``), and a choice for one-chunk documents.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import ipaddress
import logging
import os
import socket
import threading
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
SLOT_LEASE_S = 15.0    # a call's place on a replica lapses this long after its worker last renewed it
RENEW_EVERY_S = 5.0    # so a worker renews each of its calls' leases twice before it could lapse
WAKE_CHECK_S = 0.5     # a waiting call looks again this often even if nothing woke it
MOST_DOWN_S = 600      # the longest a replica is left alone before the next probe
PROBE_TIMEOUT_S = 3.0
DEFAULT_PORTS = {"http": 80, "https": 443}  # dropped from a replica's name: one server, one name


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
            raise ConfigurationError(f"SITUATE_OPENAI_BASE_URLS: {_shown(raw)!r} is not a base URL ending in /v1 "
                                     "(such as http://10.0.0.5:8000/v1)")
        replica = Replica(raw, label_of(raw))
        twin = next((r for r in found if r.label == replica.label), None)
        if twin is not None:
            raise ConfigurationError(f"SITUATE_OPENAI_BASE_URLS names one replica twice: {_shown(twin.url)!r} and "
                                     f"{_shown(raw)!r} are both {replica.label}")
        found.append(replica)
    return found


def _shown(url: str) -> str:
    """A URL as written, without its credentials."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]))


def label_of(url: str) -> str:
    """A replica's name, one for every spelling of its server: scheme and host in lower case, the
    scheme's own port dropped, the path's slashes collapsed, no credentials, and a host name that
    resolves to one IPv4 address written as that address (``localhost`` and ``127.0.0.1`` are one
    server). A name that does not resolve, or resolves to several, is kept as written."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = _address_of((parts.hostname or "").lower())
    port = parts.port if parts.port and parts.port != DEFAULT_PORTS.get(scheme) else None
    path = "/" + "/".join(p for p in parts.path.split("/") if p)
    netloc = f"[{host}]" if ":" in host else host
    return urlunsplit((scheme, f"{netloc}:{port}" if port else netloc, path, "", ""))


@functools.lru_cache(maxsize=256)
def _address_of(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    try:
        found = {a[4][0] for a in socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)}
    except OSError:
        return host
    return str(found.pop()) if len(found) == 1 else host


def rank(document: str, replicas: list[Replica]) -> list[int]:
    """The replicas in ``document``'s order of preference (rendezvous: highest score first)."""
    def score(i: int) -> bytes:
        return hashlib.blake2b(f"{document}\x00{replicas[i].label}".encode(), digest_size=8).digest()

    return sorted(range(len(replicas)), key=score, reverse=True)


@dataclass(frozen=True)
class Ticket:
    """A call's slot on a replica, reserved before the call is made."""

    replica: Replica
    call: str


class Leases:
    """The places this process's calls hold on replicas, renewed by one thread every
    ``RENEW_EVERY_S`` in one round trip for all. A process that dies stops renewing, and its
    places lapse within ``SLOT_LEASE_S``: a lease as long as a call's longest life would keep a
    crashed worker's slots taken for minutes. Renewals that fail (Redis away) are tried again at
    the next turn; a place found lapsed is counted (another call may hold its slot now)."""

    def __init__(self, lease_s: float = SLOT_LEASE_S, every_s: float = RENEW_EVERY_S) -> None:
        self.lease_s, self.every_s = lease_s, every_s
        self.held: dict[str, str] = {}  # call -> label
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.pid = 0

    def hold(self, label: str, call: str) -> None:
        with self.lock:
            self.held[call] = label
            if self.thread is None or not self.thread.is_alive() or self.pid != os.getpid():  # a forked child starts its own
                self.pid = os.getpid()
                self.thread = threading.Thread(target=self._renew_forever, name="replica-leases", daemon=True)
                self.thread.start()

    def release(self, call: str) -> None:
        with self.lock:
            self.held.pop(call, None)

    def renew_now(self) -> None:
        with self.lock:
            calls = [(label, call) for call, label in self.held.items()]
        for label, call in store.renew(calls, self.lease_s):
            log.warning("a call's place on replica %s lapsed before it ended (its worker could not renew it)", label)
            metrics.count("llm_replica_leases_lapsed", 1, replica=label)
            self.release(call)

    def _renew_forever(self) -> None:
        while True:
            time.sleep(self.every_s)
            try:
                self.renew_now()
            except Exception as e:  # noqa: BLE001 - the next turn tries again; the lease has two turns of slack
                log.warning("could not renew the replicas' leases: %s: %s", type(e).__name__, e)


leases = Leases()


class Router:
    """Places calls on replicas for one worker process (the state is the fleet's, in Redis)."""

    def __init__(self, replicas: list[Replica]):
        if not replicas:
            raise ConfigurationError("the openai contextualizer needs SITUATE_OPENAI_BASE_URLS on the workers: "
                                     "your servers' base URLs, comma-separated, each ending in /v1")
        self.replicas = replicas
        self.disagreeing: frozenset[str] = frozenset()
        self.announce()

    def announce(self) -> None:
        """Say which replicas this worker lists (each heartbeat); warn once when the workers'
        lists differ, and again when that changes."""
        labels = [r.label for r in self.replicas]
        mine = store.fingerprint(labels)
        others = frozenset(fp for fp in store.announce(labels) if fp != mine)
        if others and others != self.disagreeing:
            log.warning("the workers list the replicas differently: this one lists %s (list %s), others %s; "
                        "set one SITUATE_OPENAI_BASE_URLS on every worker", ", ".join(labels), mine,
                        "; ".join(sorted(others)))
        self.disagreeing = others

    def reserve(self, document: str) -> Ticket:
        """A slot on ``document``'s replica for one call, waited for in the replica's line; the
        caller gives it back with ``release`` (``slot`` does both around a call)."""
        s = get_settings()
        order = rank(document, self.replicas)
        labels = [self.replicas[i].label for i in order]
        call, held = uuid.uuid4().hex, -1
        waiting_since, leave = time.monotonic(), False
        try:
            while True:
                place = store.take(document, labels, call, slots=s.openai_replica_concurrency,
                                   margin=s.openai_imbalance, lease_s=leases.lease_s, keep_s=KEEP_S,
                                   routing=s.openai_routing, held=held, leave=leave)
                if place.around and held < 0:
                    metrics.count("llm_replica_calls_around", 1, replica=place.around)
                if place.moved_from:
                    why = "it waited its turn there past SITUATE_OPENAI_WAIT_S" if leave and place.replica != held \
                        else "it is down or no longer listed"
                    log.warning("document %s moved from replica %s to %s: %s", document, place.moved_from,
                                labels[place.replica], why)
                    metrics.count("llm_replica_moves", 1, replica=place.moved_from)
                if place.replica < 0:
                    if self.probe():  # every replica is down: the ones due are probed now, not at the next heartbeat
                        continue
                    raise ProviderFault("connection", s.openai_down_s / 2,
                                        "every replica in SITUATE_OPENAI_BASE_URLS is down")
                if place.replica != held:
                    waiting_since = time.monotonic()
                held = place.replica
                leases.hold(labels[held], call)  # renewed from now on, waiting or in a slot
                if place.slot:
                    break
                # In its replica's line: woken when a slot is given back, or at the deadline
                # (then it may leave for a replica with a free slot), or after a short while in
                # case the call that would have woken it was lost.
                waited = time.monotonic() - waiting_since
                store.wait_turn(call, max(0.01, min(WAKE_CHECK_S, s.openai_wait_s - waited)))
                leave = time.monotonic() - waiting_since >= s.openai_wait_s
        except BaseException:
            leases.release(call)
            if held >= 0:
                with contextlib.suppress(Exception):  # else it lapses within a lease
                    store.give_back(labels[held], call, s.openai_replica_concurrency)
            raise
        return Ticket(self.replicas[order[place.replica]], call)

    def release(self, ticket: Ticket) -> None:
        leases.release(ticket.call)
        store.give_back(ticket.replica.label, ticket.call, get_settings().openai_replica_concurrency)

    @contextlib.contextmanager
    def slot(self, document: str, ticket: Ticket | None = None) -> Iterator[Replica]:
        """A slot on ``document``'s replica held while the block runs: ``ticket``'s, reserved
        before, or one waited for here."""
        held = ticket or self.reserve(document)
        try:
            yield held.replica
        finally:
            self.release(held)

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


RETIRE_EVERY_S = 600.0  # a replica retires after a day unlisted: looking every heartbeat buys nothing
_retired_at: float | None = None


def probe_due() -> None:
    """The heartbeat's duty on a worker that routes to replicas: say which it lists, bring back
    those that answer; and on every worker, now and then, retire those no worker has listed for
    a day (the last one to list a replica may be gone for good)."""
    global _retired_at
    if get_settings().openai_base_urls:
        router().announce()
        router().probe()
    if _retired_at is None or time.monotonic() - _retired_at >= RETIRE_EVERY_S:
        store.retire_unlisted()
        _retired_at = time.monotonic()
