"""The shared rate limiter's Lua scripts, against the real Redis."""

from __future__ import annotations


def test_rate_limiter_is_shared_and_429_penalties_do_not_add_up():
    import time
    import uuid

    from workers.contextualizers.llm.ratelimit import RateLimiter
    from workers.models import Limits

    scope = uuid.uuid4().hex
    a, b = RateLimiter(scope, Limits(rpm=120, itpm=10**6, otpm=10**6), burst_s=1.0), \
        RateLimiter(scope, Limits(rpm=120, itpm=10**6, otpm=10**6), burst_s=1.0)
    t0 = time.monotonic()
    for limiter in (a, b, a, b, a, b):  # capacity 2, then 2 per second, whoever asks
        limiter.acquire(10, 10)
    assert 1.7 < time.monotonic() - t0 < 3.0
    for _ in range(5):  # five workers told "retry after 1 s" at once: still about 1 s
        a.penalize(1.0)
    t0 = time.monotonic()
    b.acquire(10, 10)
    assert 0.8 < time.monotonic() - t0 < 1.6


def test_rate_limiter_settles_a_request_larger_than_its_bucket_as_the_provider_charges_it():
    """The provider charges such a request the whole bucket (no more); settling the unclipped
    estimate against it used to refund tokens the provider never gave back: 429s followed."""
    import uuid

    import pytest

    from workers.contextualizers.llm.ratelimit import RateLimiter
    from workers.models import Limits

    limiter = RateLimiter(uuid.uuid4().hex, Limits(rpm=6000, itpm=600, otpm=10**6), burst_s=1.0)  # 10 tokens, 10/s
    taken = limiter.acquire(50, 1)
    assert taken.input_tokens == 10
    limiter.settle(taken, 40, 1)  # real usage also over the bucket: charged 10 by the provider too
    with pytest.raises(TimeoutError):  # the bucket is empty: 8 tokens need ~0.8 s of refill
        limiter.acquire(8, 1, deadline_s=0.3)
    limiter.settle(limiter.acquire(8, 1, deadline_s=5), 2, 1)  # a small one, refunded down to 2


def test_rate_limiter_does_not_trust_worker_clocks(monkeypatch):
    """A worker whose clock reads behind (descheduled between reading it and the script
    running) must not make the bucket refill the same seconds twice."""
    import time
    import uuid

    import pytest

    from workers.contextualizers.llm.ratelimit import RateLimiter
    from workers.models import Limits

    limiter = RateLimiter(uuid.uuid4().hex, Limits(rpm=6000, itpm=600, otpm=10**6), burst_s=1.0)  # 10 tokens, 10/s
    limiter.acquire(10, 1)  # drained
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 5.0)  # this worker lags 5 s
    with pytest.raises(TimeoutError):
        limiter.acquire(10, 1, deadline_s=0.05)
    monkeypatch.setattr(time, "time", real)
    with pytest.raises(TimeoutError):  # still ~1 s of refill away, not refilled by the lag
        limiter.acquire(10, 1, deadline_s=0.3)
