"""A fleet of hosts with a network between them (``ops/fleet/hosts.py``): a worker host cut from Redis,
from OpenSearch, from the paid APIs or from everything for longer than its leases, then healed;
a whole host lost at once. Each run is audited as the fault runs are (``tests/faults``): every
document indexed once at its last version, nothing lost, nothing stale, and the calls paid twice
no more than those in flight when the link was cut."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.faults.conftest import Pace, audit, documents, expected_of, report, wait_done
from tests.fleet.conftest import ADMIN, RECOVERY_S, worker_env
from tests.support import TEST_MODEL

LLM = {"contextualizer": "anthropic", "model": TEST_MODEL, "embedder": "voyage"}
# Longer than a lease (0.6 x RECOVERY_S) several times over: the other host takes the work.
CUT_S = 3 * RECOVERY_S
PARTITIONS = {"redis": ("redis",), "opensearch": ("search",), "the paid APIs": ("paid",), "everything": ()}


def _submit(network, collection: str, docs: list[dict]) -> None:
    """Through the API on its own host, as a producer would, by its address."""
    api = getattr(network, "api_process", None) or network.api(worker_env())
    headers = {"Authorization": f"Bearer {ADMIN}"}
    made = httpx.put(f"{api.url}/v1/collections/{collection}", json=LLM, headers=headers, timeout=60)
    assert made.status_code == 200, made.text
    sent = httpx.post(f"{api.url}/v1/collections/{collection}/documents", headers=headers, timeout=60,
                      json={"documents": [{"id": d["id"], "text": d["text"], "chunks": d["chunks"]} for d in docs]})
    assert sent.status_code == 202, sent.text


@pytest.mark.parametrize("run", [1, 2, 3])
@pytest.mark.parametrize("kind", list(PARTITIONS))
def test_a_worker_host_cut_off_longer_than_its_leases_then_healed(hosts, standin, collection_name, kind, run):
    docs = documents(48, chunks=4, tag=f"{kind}-{run}")
    submitted = time.monotonic()
    _submit(hosts, collection_name, docs)
    pace = Pace.of_first(collection_name, submitted, n=3)
    cut = time.time()
    hosts.cut("w1", *PARTITIONS[kind])
    in_flight = standin.in_flight_during(cut - 0.5, cut + 0.5)
    # While w1 is cut off, a new version of some documents: w1's late writes of the old ones
    # must not land over them.
    changed = documents(8, chunks=4, tag=f"{kind}-{run}-v2")
    _submit(hosts, collection_name, changed)
    time.sleep(CUT_S)
    hosts.heal("w1", *PARTITIONS[kind])
    final = changed + docs[len(changed):]
    took = wait_done(collection_name, [d["id"] for d in final], timeout=pace.deadline(len(docs), extra_s=CUT_S + RECOVERY_S))
    time.sleep(RECOVERY_S)  # what w1 held at the cut lands now, late: then the audit
    result = audit(collection_name, expected_of(final), standin)
    report(f"w1 cut from {kind} {CUT_S} s (run {run})", result, in_flight=in_flight, done_s_after_heal=round(took, 1))
    assert result.indexed == len(final) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0
    assert result.paid_twice <= in_flight


def test_a_lost_host_its_processes_and_its_link_at_once(hosts, standin, collection_name):
    docs = documents(30, chunks=4, tag="lost")
    submitted = time.monotonic()
    _submit(hosts, collection_name, docs)
    pace = Pace.of_first(collection_name, submitted, n=3)
    lost = time.time()
    hosts.lose("w1")
    in_flight = standin.in_flight_during(lost - 0.5, lost + 0.5)
    lost_at = time.monotonic()
    # The survivor alone: its pace halves (slack 2 x 3), after the lost host's documents come back.
    allowed = pace.deadline(len(docs), extra_s=RECOVERY_S, slack=6, floor_s=60)
    wait_done(collection_name, [d["id"] for d in docs], timeout=allowed + 60)
    after = time.monotonic() - lost_at
    result = audit(collection_name, expected_of(docs), standin)
    report("w1 lost: every process killed, its link cut", result, in_flight=in_flight,
           all_indexed_s_after_loss=round(after, 1), allowed_s=round(allowed))
    assert result.indexed == len(docs) and result.lost == 0 and not result.failed
    assert result.duplicate_ids == 0 and result.stale_chunks == 0 and result.paid_twice <= in_flight
    assert after < allowed
