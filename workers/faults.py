"""Calls out of the process — the paid APIs (Anthropic, Bedrock, Voyage, Cohere) and S3 — fail in
one of two ways, whichever SDK raised the error, and each way is handled once, here.

- **Transient**: the same request later will do. A connection refused, reset or closed without
  an answer (a peer dropping an idle keep-alive connection is the most ordinary fault there is),
  a connect or read timeout, a DNS or TLS failure, and the answers 408, 429 (and throttling
  exceptions), 5xx and 529. ``call`` retries these in place, with exponential backoff and jitter,
  waiting what a ``retry-after`` asks; each is counted (``provider_faults`` on ``/metrics``). A 429
  spends patience, not attempts: a rate limit is "not now", not a failure.
- **Permanent**: any other 4xx (a bad input, a missing model, a wrong key): asking again is
  paying again for the same refusal. It fails the document with the provider's own message
  (``ProviderRefused``).

When the attempts run out on transient faults, ``ProviderUnavailable`` says so: a stage treats it
as it treats an unreachable Redis (``pipeline.guard``: the stage runs again in place, within
``SITUATE_TRANSIENT_PATIENCE_S``), and what was paid for meanwhile is checkpointed. So a transient
fault never fails a document; an outage longer than that patience does, with the reason.

The SDKs' own retries are turned off where they are made: one loop, one count, one backoff.
Errors are told apart by their HTTP status where they carry one, else by their class's names
along its MRO and cause chain: no SDK is imported here to be recognised.
"""

from __future__ import annotations

import http.client
import logging
import random
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from workers import metrics
from workers.errors import ProviderFault, ProviderRefused, ProviderUnavailable

log = logging.getLogger("situate.faults")
T = TypeVar("T")

MAX_ATTEMPTS = 8
RATE_LIMIT_PATIENCE_S = 300.0
BASE_DELAY_S, MAX_DELAY_S = 0.5, 30.0

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
    http_529 or http_5xx), or None: permanent, or not a provider's error at all."""
    for e in _chain(error):
        if isinstance(e, ProviderFault):
            return e
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


def refusal(error: BaseException) -> ProviderRefused | None:
    """A provider's permanent answer (a 4xx other than 408 and 429) as the document's reason."""
    for e in _chain(error):
        status, code, _ = _status(e)
        if 400 <= status < 500:
            return ProviderRefused(f"the provider refused the request ({status}{' ' + code if code else ''}): "
                                   f"{str(e)[:300]}")
    return None


def backoff(failures: int) -> float:
    """Seconds to wait after the ``failures``-th fault in a row: exponential, with jitter."""
    return min(MAX_DELAY_S, BASE_DELAY_S * 2 ** (failures - 1)) * (0.5 + random.random())


def count(provider: str, kind: str) -> None:
    try:
        metrics.count("provider_faults", 1, provider=provider, kind=kind)
    except Exception as e:  # noqa: BLE001 - the count is lost, not the call
        log.debug("provider fault not counted: %s", e)


def call(fn: Callable[[], T], provider: str, attempts: int = MAX_ATTEMPTS,
         rate_limit_patience_s: float = RATE_LIMIT_PATIENCE_S) -> T:
    """``fn()``, its transient faults retried in place; ``provider`` names it on ``/metrics``
    (``voyage``, ``bedrock``, ``cohere``, ``s3``…). A permanent answer raises ``ProviderRefused``;
    attempts (or a rate limit's patience) run out: ``ProviderUnavailable``."""
    failures = 0
    patience_until = time.monotonic() + rate_limit_patience_s
    while True:
        try:
            return fn()
        except Exception as e:
            fault = classify(e)
            if fault is None:
                refused = refusal(e)
                if refused is not None:
                    raise refused from None
                raise
        count(provider, fault.kind)
        if fault.kind == "http_429":
            if time.monotonic() > patience_until:
                raise ProviderUnavailable(f"{provider}: still rate limited after {rate_limit_patience_s:.0f} s "
                                          f"({fault})") from None
            delay = fault.retry_after if fault.retry_after is not None else backoff(1)
            time.sleep(delay * (1 + random.random() * 0.1))
            continue
        failures += 1
        if failures >= attempts:
            raise ProviderUnavailable(f"{provider}: gave up after {failures} attempts ({fault})") from None
        time.sleep(max(backoff(failures), fault.retry_after or 0.0))
