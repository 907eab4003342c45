"""The workers' scaling replayed: a backlog that rises and drains in a live Redis, read through
``GET /v1/backlog`` as KEDA's metrics-api scaler reads it (a real API process, a bearer token),
fed through KEDA's rule with the chart's own numbers. Messages are sent by Celery's own
sender into Kombu's priority lists and taken as a worker takes them (delivered, held
unacknowledged, then acknowledged), so the signal sees what it sees in production."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from ops.harness import Api
from tests.deploy.chart import by_name, render
from workers import keys
from workers.connections import redis_client
from workers.pipeline import sending
from workers.pipeline.routing import CHUNK_PRIORITY, sublists
from workers.storage import fairqueue

TOKEN = "scaler-token-5c1e"


@dataclass
class Scaler:
    """KEDA with its HPA: replicas = ceil(backlog / target) within [min, max]; active above the
    activation value; a kind with min 0 goes to zero after ``cooldown`` s inactive; a scale-down
    takes the highest recommendation of the stabilization window, one pod a minute at most."""

    target: float
    low: int
    high: int
    cooldown: float
    window: float
    replicas: int
    last_active: float = -math.inf
    last_down: float = -math.inf
    recommendations: deque[tuple[float, int]] = field(default_factory=deque)

    @classmethod
    def from_chart(cls, spec: dict[str, Any]) -> Scaler:
        (trigger,) = spec["triggers"]
        window = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"]
        return cls(target=float(trigger["metadata"]["targetValue"]), low=spec["minReplicaCount"],
                   high=spec["maxReplicaCount"], cooldown=spec["cooldownPeriod"], window=window,
                   replicas=spec["minReplicaCount"])

    def step(self, now: float, backlog: float) -> int:
        if backlog > 0:  # activationTargetValue "0"
            self.last_active = now
        if backlog <= 0 and now - self.last_active >= self.cooldown:
            wanted = self.low  # KEDA deactivates: to min (zero where min is zero)
        else:
            wanted = max(self.low, 1, min(self.high, math.ceil(backlog / self.target)))
        self.recommendations.append((now, wanted))
        while self.recommendations[0][0] < now - self.window:
            self.recommendations.popleft()
        if wanted >= self.replicas:
            self.replicas = wanted
        elif now - self.last_down >= 60:  # policies: one pod per 60 s
            stable = max(r for _, r in self.recommendations)
            if stable < self.replicas:
                self.replicas -= 1
                self.last_down = now
        return self.replicas


class Fleet:
    """Worker pods as Kombu sees them: each finishes what it held since the last poll
    (acknowledges), then takes up to ``prefetch`` more, downstream first as a worker does
    (``routing.all_queues``); taken messages sit in Kombu's unacknowledged hash meanwhile."""

    def __init__(self, prefetch: int = 12) -> None:
        self.channel = sending.app().connection_for_read().default_channel
        self.prefetch = prefetch
        self.held: list[list[str]] = []

    def work(self, replicas: int) -> None:
        while len(self.held) < replicas:
            self.held.append([])
        del self.held[replicas:]  # a removed pod: a warm stop, its messages done (the compose test shows it)
        for tags in self.held:
            self.ack(tags)
            for _ in range(self.prefetch):
                message = next((m for q in ("index", "chunk") if (m := self.channel.basic_get(q, no_ack=False))), None)
                if message is None:
                    break
                tags.append(message.delivery_tag)

    def ack(self, tags: list[str]) -> None:
        for tag in tags:
            self.channel.basic_ack(tag)
        tags.clear()

    def stop(self) -> None:
        for tags in self.held:
            self.ack(tags)


def clear(queues: list[str]) -> None:
    r = redis_client()
    r.delete(*[name for q in queues for name in sublists(q)], keys.KOMBU_UNACKED, keys.KOMBU_UNACKED_INDEX)
    fairqueue.forget_collection("replay")


@pytest.fixture
def api_url():
    api = Api(env={"SITUATE_API_TOKEN": TOKEN})
    yield api.url
    api.stop()


def test_workers_follow_the_backlog_up_and_down(api_url: str) -> None:
    spec = by_name(render(), "ScaledObject")["situate-worker-cpu"]["spec"]
    url = spec["triggers"][0]["metadata"]["url"]
    queues = url.split("queues=", 1)[1].split(",")
    assert queues == ["chunk", "index"]
    scaler = Scaler.from_chart(spec)
    poll = float(spec["pollingInterval"])
    clear(queues)
    fleet = Fleet()
    history: list[tuple[float, int, int, int]] = []  # (time, backlog, replicas, base list length)
    prefetched_only = 0

    def read_backlog() -> dict[str, Any]:
        # What KEDA's metrics-api scaler does: GET the url (its host swapped for the test's API).
        reply = httpx.get(f"{api_url}/v1/backlog?queues={','.join(queues)}",
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        reply.raise_for_status()
        return dict(reply.json())

    # Parked work (fair shares) counts too: a queue holds a few messages, the rest waits in lines.
    for n in range(5):
        fairqueue.park("index", "replay", {"id": f"parked-{n}", "name": "situate.index", "args": ["replay", f"d{n}"]})
    try:
        now = 0.0
        for tick in range(110):
            if tick < 12:  # rising: chunk messages at their priority (own list), index at level 0
                for _ in range(10 * (tick + 1)):
                    sending.send_task("situate.replayed", [], queue="chunk", priority=CHUNK_PRIORITY)
                for _ in range(10):
                    sending.send_task("situate.replayed", [], queue="index")
            if tick == 6:
                fairqueue.forget_collection("replay")  # the parked work was admitted and done
            fleet.work(scaler.replicas)
            signal = read_backlog()
            replicas = scaler.step(now, signal["backlog"])
            history.append((now, signal["backlog"], replicas, redis_client().llen("chunk")))
            rows = signal["queues"].values()
            assert signal["backlog"] == sum(r["waiting"] + r["parked"] + r["unacked"] for r in rows)
            if tick == 0:
                # The trap: Kombu's base list is empty (chunk messages sit in "chunk:9"), and the
                # backlog counts them, the parked work, and what the first worker prefetched.
                row = signal["queues"]["chunk"]
                assert redis_client().llen("chunk") == 0 and row["waiting"] > 0 and row["unacked"] > 0
                assert signal["queues"]["index"]["parked"] == 5
            if all(r["waiting"] == 0 and r["parked"] == 0 for r in rows) and signal["backlog"]:
                prefetched_only += 1  # in no list: a scaler reading lists would remove these workers
            now += poll
    finally:
        fleet.stop()
        clear(queues)
    backlogs = [b for _, b, _, _ in history]
    replicas = [r for _, _, r, _ in history]
    peak = replicas.index(max(replicas))
    print("\nscaling replay (s, backlog, replicas):", [(t, b, r) for t, b, r, _ in history])
    assert max(replicas) >= 4, "workers added while the backlog grows"
    assert prefetched_only, "a moment when all the work is held by workers, and it still counts"
    assert max(replicas) <= scaler.high
    assert replicas[: peak + 1] == sorted(replicas[: peak + 1]), "no removal while it grows"
    drained = next(i for i, b in enumerate(backlogs) if b == 0)
    assert drained > peak and all(b == 0 for b in backlogs[drained:])
    assert replicas[drained] > scaler.low, "not removed the moment it drains: the window keeps them a while"
    assert replicas[-1] == scaler.low, "removed after it drains"
    downs = [i for i in range(1, len(replicas)) if replicas[i] < replicas[i - 1]]
    assert all(replicas[i - 1] - replicas[i] == 1 for i in downs), "one pod at a time"
    assert all(history[i][0] - history[i - 1][0] >= 0 for i in downs)


def test_llm_workers_wake_from_zero_on_the_first_message_and_sleep_again(api_url: str) -> None:
    spec = by_name(render(), "ScaledObject")["situate-worker-llm"]["spec"]
    queues = spec["triggers"][0]["metadata"]["url"].split("queues=", 1)[1].split(",")
    scaler = Scaler.from_chart(spec)
    assert scaler.replicas == 0
    clear(queues)
    channel = sending.app().connection_for_read().default_channel
    try:
        def backlog() -> int:
            reply = httpx.get(f"{api_url}/v1/backlog?queues={','.join(queues)}",
                              headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
            return int(reply.json()["backlog"])

        assert scaler.step(0, backlog()) == 0
        sending.send_task("situate.replayed", [], queue="contextualize.3", priority=7)
        assert scaler.step(15, backlog()) == 1, "one message wakes the kind"
        message = channel.basic_get("contextualize.3", no_ack=False)  # taken: held, not done
        assert message is not None and backlog() == 1
        assert scaler.step(30, backlog()) == 1, "a held message keeps its worker"
        channel.basic_ack(message.delivery_tag)
        t = 45.0
        while scaler.step(t, backlog()) and t < 2000:
            t += 15
        assert scaler.replicas == 0 and t >= 30 + scaler.cooldown
    finally:
        clear(queues)


def test_backlog_route_refuses_unknown_queues_and_strangers(api_url: str) -> None:
    assert httpx.get(f"{api_url}/v1/backlog").status_code == 401
    reply = httpx.get(f"{api_url}/v1/backlog?queues=chunk,ingest", headers={"Authorization": f"Bearer {TOKEN}"})
    assert reply.status_code == 400 and "ingest" in reply.text
    everything = httpx.get(f"{api_url}/v1/backlog", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    assert set(everything["queues"]) == {"index", "chunk", *(f"contextualize.{i}" for i in range(4))}
