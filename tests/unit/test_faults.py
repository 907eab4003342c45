"""The one retry policy (``workers.faults``): how many tries, how long each wait, what spends
what. The errors here are what an SDK raises (a status and its headers), not a service."""

from __future__ import annotations

import pytest

from workers import faults
from workers.errors import ProviderRefused, ProviderUnavailable


class Answered(Exception):
    """An SDK's error for an HTTP answer: its status and headers."""

    def __init__(self, status: int, retry_after: float | None = None):
        super().__init__(f"answered {status}")
        self.status_code = status
        self.headers = {} if retry_after is None else {"retry-after": str(retry_after)}


def run(policy: faults.Policy, answers: list[Exception | str]) -> tuple[object, list[float], int]:
    """Call through the policy, each try taking the next answer; (result, waits, tries)."""
    waits: list[float] = []
    tries = 0

    def call() -> str:
        nonlocal tries
        answer = answers[min(tries, len(answers) - 1)]
        tries += 1
        if isinstance(answer, Exception):
            raise answer
        return answer

    try:
        for attempt in faults.retrying(policy).copy(sleep=waits.append):
            with attempt:
                result: object = call()
    except Exception as e:  # noqa: BLE001 - what the policy let through is the result
        result = e
    return result, waits, tries


def test_a_provider_answering_529_for_ever_costs_the_documented_tries_and_waits():
    result, waits, tries = run(faults.Policy(patience_s=600, rate_limit_patience_s=600, max_attempts=4), [Answered(529)])
    assert isinstance(result, ProviderUnavailable) and "gave up after 4 tries" in str(result)
    assert tries == 4 and len(waits) == 3
    for n, wait in enumerate(waits, start=1):  # 0.5 s doubling, times a jitter in [0.5, 1.5)
        assert 0.5 * 2 ** (n - 1) * 0.5 <= wait < 0.5 * 2 ** (n - 1) * 1.5, waits


def test_a_429_spends_patience_not_tries_and_its_retry_after_is_waited():
    policy = faults.Policy(patience_s=600, rate_limit_patience_s=600, max_attempts=1)
    result, waits, tries = run(policy, [Answered(429, retry_after=2), Answered(429, retry_after=2), "ok"])
    assert result == "ok" and tries == 3
    assert all(2.0 <= w <= 2.2 for w in waits), waits


def test_a_refusal_is_not_tried_again():
    result, waits, tries = run(faults.Policy(600, 600), [Answered(400)])
    assert isinstance(result, Answered) and tries == 1 and waits == []
    with pytest.raises(ProviderRefused, match="400"):
        faults.call(lambda: (_ for _ in ()).throw(Answered(400)), "test", faults.Policy(600, 600))


def test_a_prompt_over_a_servers_window_is_refused_with_the_settings_that_fit_it():
    over = Answered(400)
    over.args = ("Error code: 400 - request (11562 tokens) exceeds the available context size (8192 tokens)",)
    reason = str(faults.refusal(over))
    assert "11562 tokens" in reason and "SITUATE_OPENAI_CONTEXT_TOKENS" in reason
    assert "SITUATE_OPENAI" not in str(faults.refusal(Answered(400)))  # another refusal: no such advice


def test_an_ack_on_a_torn_down_broker_connection_is_logged_not_raised_and_still_run_at_shutdown(caplog):
    """An ack queued on the worker's event loop (acks late) that runs after a lost connection
    was tidied up: Kombu asks the detached transport for a client and raises AttributeError in
    the loop, which ended the worker (a broker fault test). Logged instead; and still a bound
    ``ack_log_error`` of its message, which Celery's prefork pool runs at shutdown."""
    import logging

    from celery.concurrency.prefork import _is_ack_callback
    from kombu.message import Message
    from vine import ppartial

    from workers.pipeline.consumer import tolerant_ack

    class OnATornDownConnection(Message):
        def ack(self, multiple: bool = False) -> None:
            raise AttributeError("'NoneType' object has no attribute 'hostname'")

    message = OnATornDownConnection(body=b"{}", delivery_tag="tag-1")
    logger = logging.getLogger("test-ack")
    with pytest.raises(AttributeError):
        message.ack_log_error(logger, ())
    tolerant = tolerant_ack(message.ack_log_error)
    with caplog.at_level(logging.WARNING, logger="situate.consumer"):
        assert tolerant(logger, ()) is None
    assert "could not be acknowledged" in caplog.text
    assert _is_ack_callback(ppartial(tolerant, logger, ()))
    def other() -> None: ...

    assert tolerant_ack(other) is other, "anything else is passed as it is"
