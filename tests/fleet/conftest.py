"""The fleet: Redis, OpenSearch, the API and two worker hosts in network namespaces of their own
(``ops/fleet/hosts.py``), the stand-in for the paid APIs outside it. One fleet for the module; each
test gets both worker hosts up and every link healed and at loopback speed."""

from __future__ import annotations

import json

import pytest

from ops.fleet import hosts as fleet_harness
from ops.harness import StandIn
from tests.faults.conftest import LATENCY, collection_name  # noqa: F401 - the faults' fixture, here too
from tests.support import SECRET_KEY, TEST_MODEL, use_services

# Leases short enough that a cut outlasts them within a test: the lease is 0.6 x this.
RECOVERY_S = 6
ADMIN = "fleet-admin-token-0123456789abcdef"


@pytest.fixture(scope="module")
def standin():
    """The paid APIs, outside the fleet (in this namespace): each host reaches it by its route."""
    server = StandIn(LATENCY)
    yield server
    server.close()


@pytest.fixture(scope="module")
def network(standin):
    why = fleet_harness.available()
    if why:
        pytest.skip(f"no fleet here: {why}")
    made = fleet_harness.Fleet(standin.url)
    with use_services(redis_url=made.redis_url, opensearch_url=made.opensearch_url):
        yield made
    made.close()


def worker_env() -> dict[str, str]:
    return {"ANTHROPIC_API_KEY": SECRET_KEY, "VOYAGE_API_KEY": SECRET_KEY,
            "SITUATE_RATE_LIMITS": json.dumps({TEST_MODEL: {"rpm": 10**6, "itpm": 10**9, "otpm": 10**9}}),
            "SITUATE_RECOVERY_S": str(RECOVERY_S), "SITUATE_PROVIDER_MAX_ATTEMPTS": "30",
            "SITUATE_API_TOKEN": ADMIN}


@pytest.fixture
def hosts(network, standin):
    """Both worker hosts running (one lost in an earlier test is brought back), every link whole."""
    network.delay(0)
    for host in ("w1", "w2"):
        network.heal(host)
        alive = [w for w in network.workers.get(host, []) if w.alive()]
        network.workers[host] = alive
        if not alive:
            network.worker(host, 3, worker_env())
    standin.configure()
    yield network
    gone = [why for ws in network.workers.values() for w in ws if (why := w.exited_on_its_own())]
    for host in ("w1", "w2"):
        network.heal(host)
    assert not gone, "a worker exited on its own:\n" + "\n".join(gone)
