"""opensearch-py's serializer as the workers and the API build it (orjson's speed, the standard
library's reach): what it writes OpenSearch reads as the standard library would have written it."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid

import numpy as np
import pytest
from opensearchpy import JSONSerializer, OpenSearch
from opensearchpy.exceptions import SerializationError

from workers.connections import OPENSEARCH_CONNECTIONS, FastJSON, opensearch_options


@pytest.mark.parametrize("data", [
    {"query": {"match": {"text": "the Ulta Beauty filing — 2023 «annual» report"}}, "size": 150},
    {"vector": [0.125, -1e-7, 3.0], "k": 10, "nested": [{"a": None, "b": True}]},
    {"day": datetime.date(2024, 3, 1), "at": datetime.datetime(2024, 3, 1, 12, 30), "id": uuid.UUID(int=7)},
    {"price": decimal.Decimal("1.25"), "n": np.int64(3), "x": np.float32(0.5), "v": np.arange(3)},
    {"huge": 2**70},  # past 64 bits: orjson declines it, the standard library writes it
])
def test_what_it_writes_reads_as_the_standard_librarys_would(data):
    assert json.loads(FastJSON().dumps(data)) == json.loads(JSONSerializer().dumps(data))


def test_it_reads_what_the_standard_library_reads_and_refuses_the_same():
    text = '{"hits": {"hits": [{"_id": "a", "_score": 1.5, "fields": {"chunk": [3]}}]}, "took": 4}'
    assert FastJSON().loads(text) == json.loads(text)
    assert FastJSON().dumps("already a string") == "already a string"
    with pytest.raises(SerializationError):
        FastJSON().loads("{not json")
    with pytest.raises(SerializationError):
        FastJSON().dumps({"not serializable": object()})


def test_every_client_is_built_with_it_and_keeps_a_connection_for_each_request_beside_another():
    """Unsized, opensearch-py's pool keeps one connection a node: each search beside another
    opened and closed a connection of its own (seen in a profile of the API at 16 clients)."""
    client = OpenSearch(**opensearch_options())
    assert isinstance(client.transport.serializer, FastJSON)
    pools = [c.pool.pool.maxsize for c in client.transport.connection_pool.connections]
    assert pools and all(size == OPENSEARCH_CONNECTIONS >= 16 for size in pools), pools


def test_a_forked_child_makes_its_own_opensearch_client():
    """A pool child must not read its parent's sockets: two processes on one keep-alive connection
    took each other's answers (a search answered with another request's body: KeyError 'hits')."""
    import os

    from workers import connections

    parent = connections.opensearch_client()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a client of its own, or the parent's
        os.write(write, b"own" if connections.opensearch_client() is not parent else b"shared")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"own"
    assert connections.opensearch_client() is parent  # the parent keeps its own
