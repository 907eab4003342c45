"""Which refusals from OpenSearch are worth another try (the index stage then waits and retries
in place) and which fail the document at once."""

from __future__ import annotations

import pytest

from workers.storage.chunk_index import is_transient


@pytest.mark.parametrize("status, transient", [
    (429, True), (500, True), (503, True), (0, True),
    ("N/A", True),  # the connection dropped mid-request: a node went down (seen in the fault test)
    (None, True),
    (400, False), (409, False), (413, False),
])
def test_only_overload_outage_and_no_answer_are_retried(status, transient):
    assert is_transient(status) is transient
