"""One rate limiter for every worker, in Redis: requests, input tokens and output tokens per
minute, per model — the way the provider counts them, for the whole account.

Token buckets, refilled continuously at limit/60 per second up to a capacity (the limit
itself, as Anthropic does, or ``burst_s`` seconds' worth). A call reserves its estimate
before it is sent — input tokens it expects to pay (uncached + cache writes; cache reads do
not count) and its ``max_tokens`` — and the difference with the real usage is settled when the
response arrives. Reserving first is what keeps 429s rare: ten workers cannot all spend the
same remaining budget. The buckets themselves are ``storage.buckets``: one Lua script makes
the check-and-take atomic.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass

from workers import keys
from workers.connections import REDIS_NOT_NOW
from workers.models import Limits
from workers.storage import buckets

# The buckets read the time from Redis itself (``storage.buckets``): one clock for all workers.
# A time passed in by each worker goes backwards whenever a worker is descheduled between
# reading its clock and its script running (2 cores, dozens of threads), and every step back
# refills the bucket a second time: the limiter then hands out tokens the provider does not have.


class TokenCalibration:
    """Provider-counted tokens per estimated token for one kind of text, learned from usage.

    Our estimate is tokenizer-free, so its error is large (the cookbook's code: the provider
    counts 0.55-1.1 of it, depending on the file). Reserving the mean would under-reserve half
    the calls, and while those are in flight this limiter believes the shared bucket fuller
    than the provider's: the next calls meet 429s. So a reservation is the mean plus
    ``spread`` standard deviations of the observed ratio. The cost is small: an
    over-reservation is only held while its call is in flight, and refunded at settle.
    """

    def __init__(self, prior: float = 1.0, prior_sd: float = 0.15, weight: float = 0.1, spread: float = 1.5):
        self.mean, self.var = prior, prior_sd ** 2
        self.weight, self.spread = weight, spread

    def observe(self, estimated: int, counted: int) -> None:
        if estimated < 50 or counted <= 0:  # too small to say anything
            return
        ratio = min(1.5, max(0.3, counted / estimated))  # an outlier moves it, boundedly
        deviation = ratio - self.mean
        self.mean += self.weight * deviation
        self.var = (1 - self.weight) * (self.var + self.weight * deviation ** 2)

    def reserve(self, estimated: int) -> int:
        return math.ceil(estimated * (self.mean + self.spread * max(0.03, math.sqrt(self.var))))


@dataclass
class Reservation:
    input_tokens: int
    output_tokens: int


class RateLimiter:
    """Shared by all processes that use the same Redis and ``scope`` (provider + model)."""

    def __init__(self, scope: str, limits: Limits, burst_s: float = 60.0):
        self.limits = limits
        self.keys = [keys.rate_bucket(scope, dim) for dim in ("requests", "input", "output")]
        frac = burst_s / 60.0
        self.buckets = [(max(1.0, per_min * frac), per_min / 60.0) for per_min in (limits.rpm, limits.itpm, limits.otpm)]

    def acquire(self, input_tokens: int, output_tokens: int, deadline_s: float = 600) -> Reservation:
        """Block until the call fits; returns what was reserved (to settle later)."""
        needs = (1, input_tokens, output_tokens)
        give_up = time.monotonic() + deadline_s
        while True:
            wait = buckets.take(self.keys, self.buckets, needs)
            if wait <= 0:
                # What the bucket really gave: a request larger than the bucket takes it all
                # (the script clips), as the provider's bucket does.
                return Reservation(self._clip(1, input_tokens), self._clip(2, output_tokens))
            if time.monotonic() + wait > give_up:
                raise TimeoutError(f"rate limiter: no capacity within {deadline_s:.0f}s")
            # A little jitter so waiting workers do not all retry at the same instant.
            time.sleep(min(wait, 5.0) * (1 + random.random() * 0.1))

    def _clip(self, bucket: int, amount: int) -> int:
        return int(min(amount, self.buckets[bucket][0]))

    def settle(self, reserved: Reservation, input_tokens: int, output_tokens: int) -> None:
        """Charge the difference between real usage and the reservation (may be a refund),
        both clipped at the bucket's capacity the way the provider charges them: settling an
        unclipped amount against a clipped reservation would leave this bucket fuller than
        the provider's, and the next requests would meet 429s."""
        deltas = (0, self._clip(1, input_tokens) - reserved.input_tokens,
                  self._clip(2, output_tokens) - reserved.output_tokens)
        changed = [i for i, delta in enumerate(deltas) if delta]
        if changed:
            try:
                buckets.adjust([self.keys[i] for i in changed], [self.buckets[i] for i in changed],
                               [deltas[i] for i in changed])
            except REDIS_NOT_NOW:  # the bucket lapses back on its own
                pass

    def penalize(self, seconds: float) -> None:
        """After a 429: empty the request bucket for ``seconds`` so every worker backs off,
        not only the one that was told."""
        buckets.empty_for(self.keys[0], self.buckets[0], seconds)


class Unlimited:
    """No shared limit: a server of your own queues what it cannot serve yet (its replicas' slots
    are ``replicas``' to share), and the account limits above are a hosted API's."""

    def acquire(self, input_tokens: int, output_tokens: int, deadline_s: float = 600) -> Reservation:
        return Reservation(0, 0)

    def settle(self, reserved: Reservation, input_tokens: int, output_tokens: int) -> None:
        pass

    def penalize(self, seconds: float) -> None:
        pass
