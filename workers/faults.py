"""Every fault that is waited out is decided here, once: which faults are transient, how long to
wait between tries, and for how long in all. Nothing else in situate retries (the SDKs' own
retries are off where their clients are made).

**Which faults.** A call out of the process — the paid APIs (Anthropic, Bedrock, Voyage,
Cohere) and S3 — fails in one of two ways, whichever SDK raised the error (``classify``):

- **transient**: the same request later will do. A connection refused, reset or closed without
  an answer (a peer dropping an idle keep-alive connection is the most ordinary fault there is),
  a connect or read timeout, a DNS or TLS failure, and the answers 408, 429 (and throttling
  exceptions), 5xx and 529. Each is counted (``provider_faults`` on ``/metrics``).
- **permanent**: any other 4xx (a bad input, a missing model, a wrong key): asking again is
  paying again for the same refusal. It fails the document with the provider's own message
  (``ProviderRefused``).

A store's faults (``STORE_FAULTS``: Redis, OpenSearch or the broker unreachable, a Redis at
maxmemory, OpenSearch's "not now") are all transient.

**How long** (``Policy``, from the settings). A call's transient failures are tried again until
``SITUATE_TRANSIENT_PATIENCE_S`` (900 s) after its first try, or ``SITUATE_PROVIDER_MAX_ATTEMPTS``
tries if that is set; each wait is the answer's ``retry-after`` when it has one, else 0.5 s
doubling per failure up to 30 s, times a jitter in [0.5, 1.5). A 429 is "not now", not a
failure: it spends ``SITUATE_RATE_LIMIT_PATIENCE_S`` (900 s), not tries. A search waits on a
reranker or a query embedder for ``QUERY``'s few seconds, not a document's quarter of an hour.
When the patience is spent, ``ProviderUnavailable`` fails the document with the reason; what was
paid for is checkpointed, so ``situate retry`` pays only for the rest.

**Where.** ``call`` wraps any one call; the LLM scheduler's loop uses ``retrying`` (it reserves
rate-limit budget per try); the stage guard runs a stage again in place on a store fault
(``retrying_stores``) — never on a provider's, whose call has spent its patience already. So a
provider that answers 529 for ever costs one call's tries and patience, not a product of loops.

Errors are told apart by their HTTP status where they carry one, else by their class's names
along its MRO and cause chain: no SDK is imported here to be recognised.
"""

from __future__ import annotations

import http.client
import logging
import random
import re
import socket
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import tenacity
from opensearchpy.exceptions import ConnectionError as OpenSearchConnectionError

from workers import metrics
from workers.connections import REDIS_NOT_NOW
from workers.errors import ProviderFault, ProviderRefused, ProviderUnavailable, StoreFull, WriteNotNow
from workers.settings import get_settings

log = logging.getLogger("situate.faults")
T = TypeVar("T")

BASE_DELAY_S, MAX_DELAY_S = 0.5, 30.0

# Unreachable Redis or OpenSearch, a Redis at maxmemory (its writes refused until memory is free)
# or without room for a file's text yet, OpenSearch saying "not now": the same work, tried again,
# will do. And the broker's "could not send" (kombu's OperationalError), told by its name as the
# SDKs' errors are, so that the producers' read side imports no Celery (``is_store_fault``).
STORE_FAULTS: tuple[type[BaseException], ...] = (*REDIS_NOT_NOW, OpenSearchConnectionError, TimeoutError,
                                                 ConnectionError, WriteNotNow, StoreFull)


def is_store_fault(error: BaseException) -> bool:
    return isinstance(error, STORE_FAULTS) or (type(error).__module__.startswith("kombu")
                                               and "OperationalError" in _names(error))

# Class names, across the SDKs we call (httpx and httpx2, requests, urllib3, aiohttp, botocore,
# voyageai, anthropic), that mean the request may not have been answered at all.
CONNECTION = {"APIConnectionError", "ConnectError", "RemoteProtocolError", "ReadError", "WriteError", "NetworkError",
              "ProtocolError", "ChunkedEncodingError", "ConnectionError", "EndpointConnectionError",
              "ConnectionClosedError", "ProxyConnectionError", "SSLError", "NewConnectionError", "IncompleteRead",
              "RemoteDisconnected", "ServerDisconnectedError", "ClientConnectionError", "TryAgain"}
TIMEOUT = {"APITimeoutError", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout", "TimeoutException",
           "Timeout", "ReadTimeoutError", "ConnectTimeoutError", "ServerTimeoutError"}
# Error codes a provider sends with its status (botocore's ``Error.Code``).
THROTTLED = {"ThrottlingException", "TooManyRequestsException", "Throttling", "ThrottledException", "SlowDown",
             "RequestLimitExceeded", "ProvisionedThroughputExceededException"}
OVERLOADED = {"ServiceUnavailableException", "ServiceUnavailable", "ModelNotReadyException", "ServiceUnavailableError"}


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _names(error: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(error).__mro__}


def _status(error: BaseException) -> tuple[int, str, dict[str, Any]]:
    """(HTTP status or 0, the provider's error code or "", response headers) of an SDK's error."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):  # botocore's ClientError
        meta = response.get("ResponseMetadata") or {}
        code = str((response.get("Error") or {}).get("Code") or "")
        return int(meta.get("HTTPStatusCode") or 0), code, dict(meta.get("HTTPHeaders") or {})
    status = getattr(error, "status_code", None) or getattr(error, "http_status", None) \
        or getattr(response, "status_code", None) or getattr(error, "status", None)
    headers = getattr(response, "headers", None) or getattr(error, "headers", None) or {}
    try:
        return int(status or 0), "", dict(headers)
    except (TypeError, ValueError):
        return 0, "", {}


def _retry_after(headers: dict[str, Any]) -> float | None:
    for key, value in headers.items():
        if str(key).lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                return None
    return None


def classify(error: BaseException) -> ProviderFault | None:
    """The transient fault ``error`` is (kind: connection, timeout, http_408, http_429,
    http_529 or http_5xx), or None: permanent, or not a provider's error at all. A store's own
    fault (Redis or OpenSearch away: redis-py names its errors as the SDKs do) is None: it is
    retried as a store fault where the work is (``is_store_fault``), never counted or billed as
    the model's."""
    for e in _chain(error):
        if isinstance(e, ProviderFault):
            return e
        if isinstance(e, (*REDIS_NOT_NOW, OpenSearchConnectionError, WriteNotNow, StoreFull)):
            return None
        status, code, headers = _status(e)
        detail = f"{type(e).__name__}: {str(e)[:200]}"
        if code in THROTTLED or status == 429:
            return ProviderFault("http_429", _retry_after(headers), detail)
        overloaded = status in (503, 529) or code in OVERLOADED or (status >= 500 and "overloaded" in str(e).lower())
        if overloaded or status >= 500 or status == 408:
            kind = "http_529" if overloaded else "http_5xx" if status >= 500 else "http_408"
            return ProviderFault(kind, _retry_after(headers), detail)
        if status:  # another 4xx: an answer, and a refusal
            return None
        names = _names(e)
        if names & TIMEOUT or isinstance(e, (TimeoutError, socket.timeout)):
            return ProviderFault("timeout", None, detail)
        if names & CONNECTION or isinstance(e, (ConnectionError, socket.gaierror, ssl.SSLError, http.client.HTTPException)):
            return ProviderFault("connection", None, detail)
    return None


# llama.cpp: "exceeds the available context size"; vLLM: "maximum context length is"; SGLang:
# "longer than the model's context length".
_OVER_WINDOW = re.compile(r"context size|context length|context window", re.I)


def refusal(error: BaseException) -> ProviderRefused | None:
    """A provider's permanent answer (a 4xx other than 408 and 429) as the document's reason."""
    for e in _chain(error):
        status, code, _ = _status(e)
        if 400 <= status < 500:
            text = str(e)
            hint = (" (the prompt is over the model's window: SITUATE_OPENAI_CONTEXT_TOKENS is the window a "
                    "request has on your servers, SITUATE_OPENAI_CHARS_PER_TOKEN what a document's estimate "
                    "assumes)" if _OVER_WINDOW.search(text) else "")
            return ProviderRefused(f"the provider refused the request ({status}{' ' + code if code else ''}): "
                                   f"{text[:300]}{hint}")
    return None


@dataclass(frozen=True)
class Policy:
    """How long transient faults are waited out: failures until ``patience_s`` after the first
    try (or ``max_attempts`` tries, when not 0), 429s until ``rate_limit_patience_s``."""

    patience_s: float
    rate_limit_patience_s: float
    max_attempts: int = 0

    def delay(self, failures: int, fault: ProviderFault | None = None) -> float:
        """The wait after the ``failures``-th failure in a row (or rate limit): the provider's
        ``retry-after`` when it sent one, else exponential with jitter."""
        if fault is not None and fault.retry_after is not None:
            return fault.retry_after * (1 + random.random() * 0.1)  # not all waiters back at the same instant
        return backoff(failures)


def for_documents() -> Policy:
    """What a document's calls and stages may wait: the deployment's settings."""
    s = get_settings()
    return Policy(s.transient_patience_s, s.rate_limit_patience_s, s.provider_max_attempts)


# A search: a person is waiting, and the search answers 503 rather than hang.
QUERY = Policy(patience_s=20.0, rate_limit_patience_s=20.0, max_attempts=4)
# Questions generated for labels (``situate labels generate``): a person at a terminal. A model
# that cannot be reached ends the run after this, rather than each sampled chunk waiting out a
# document's patience (120 chunks at 900 s: 30 hours to fail).
GENERATION = Policy(patience_s=60.0, rate_limit_patience_s=180.0)


def backoff(failures: int) -> float:
    """Seconds to wait after the ``failures``-th fault in a row: exponential, with jitter."""
    return min(MAX_DELAY_S, BASE_DELAY_S * 2 ** (failures - 1)) * (0.5 + random.random())


def count(provider: str, kind: str) -> None:
    try:
        metrics.count("provider_faults", 1, provider=provider, kind=kind)
    except Exception as e:  # noqa: BLE001 - the count is lost, not the call
        log.debug("provider fault not counted: %s", e)


class _Budget:
    """tenacity's three questions for one call, answered from the faults it met: retry (is this
    transient?), wait (how long?), stop (is the patience spent?)."""

    def __init__(self, policy: Policy, on_fault: Callable[[ProviderFault], None] | None):
        self.policy, self.on_fault = policy, on_fault
        self.fault: ProviderFault | None = None
        self.failures = self.rate_limits = 0

    def retry(self, state: tenacity.RetryCallState) -> bool:
        error = state.outcome.exception() if state.outcome is not None else None
        fault = classify(error) if error is not None else None
        if fault is None:
            return False
        self.fault = fault
        if fault.kind == "http_429":
            self.rate_limits += 1
        else:
            self.failures += 1
        if self.on_fault is not None:
            self.on_fault(fault)
        return True

    def wait(self, state: tenacity.RetryCallState) -> float:
        limited = self.fault is not None and self.fault.kind == "http_429"
        return self.policy.delay(self.rate_limits if limited else self.failures, self.fault)

    def stop(self, state: tenacity.RetryCallState) -> bool:
        waited = (state.seconds_since_start or 0.0) + state.upcoming_sleep
        if self.fault is not None and self.fault.kind == "http_429":
            return waited > self.policy.rate_limit_patience_s
        return bool(self.policy.max_attempts and self.failures >= self.policy.max_attempts) \
            or waited > self.policy.patience_s

    def give_up(self, state: tenacity.RetryCallState) -> None:
        spent = state.seconds_since_start or 0.0
        raise ProviderUnavailable(f"gave up after {state.attempt_number} tries in {spent:.0f} s ({self.fault}); "
                                  "SITUATE_TRANSIENT_PATIENCE_S says how long a fault is waited out")


def retrying(policy: Policy | None = None, on_fault: Callable[[ProviderFault], None] | None = None,
             on_wait: Callable[[ProviderFault, float], None] | None = None) -> tenacity.Retrying:
    """Tries of one call: ``for attempt in retrying(): with attempt: ...``. A transient fault is
    tried again (``on_fault`` told of each, ``on_wait`` of each wait before it starts); anything
    else is raised as it is; the patience spent raises ``ProviderUnavailable``."""
    budget = _Budget(policy or for_documents(), on_fault)

    def before_sleep(state: tenacity.RetryCallState) -> None:
        if on_wait is not None and budget.fault is not None:
            on_wait(budget.fault, state.upcoming_sleep)

    return tenacity.Retrying(retry=budget.retry, wait=budget.wait, stop=budget.stop, before_sleep=before_sleep,
                             retry_error_callback=budget.give_up)


def retrying_stores(stage: str, about: str = "") -> tenacity.Retrying:
    """Tries of one stage while a store is away (``STORE_FAULTS``), until the documents' patience
    is spent (then the store's own error is raised); each logged (with ``about``) and counted."""
    def before_sleep(state: tenacity.RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        metrics.count("stage_transient_retries", 1, stage=stage)
        log.warning("%s %s: %s: %s; again in %.0f s", stage, about, type(error).__name__, error, state.upcoming_sleep)

    return tenacity.Retrying(retry=tenacity.retry_if_exception(is_store_fault),
                             wait=lambda state: backoff(state.attempt_number),
                             stop=tenacity.stop_before_delay(for_documents().patience_s),
                             before_sleep=before_sleep, reraise=True)


def call(fn: Callable[[], T], provider: str, policy: Policy | None = None) -> T:
    """``fn()``, its transient faults waited out by ``policy`` (a document's, by default);
    ``provider`` names it on ``/metrics`` (``voyage``, ``bedrock``, ``cohere``, ``s3``…). A
    permanent answer raises ``ProviderRefused``; the patience spent, ``ProviderUnavailable``."""
    try:
        for attempt in retrying(policy, on_fault=lambda fault: count(provider, fault.kind)):
            with attempt:
                return fn()
    except (ProviderUnavailable, ProviderRefused) as e:
        raise type(e)(f"{provider}: {e}") from None
    except Exception as e:
        refused = refusal(e)
        if refused is not None:
            raise refused from None
        raise
    raise AssertionError("unreachable: tenacity returns or raises")  # pragma: no cover

