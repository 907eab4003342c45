"""Documents as they enter: validation with a reason, versions, ids, and the shard they route to."""

from __future__ import annotations

from collections import Counter

import pytest

from workers.documents.identity import chunk_id, content_version
from workers.documents.validation import decode_body
from workers.errors import BadDocument
from workers.pipeline.routing import shard_for


def test_shard_is_stable_and_spreads():
    assert shard_for("c", "doc-1", 8) == shard_for("c", "doc-1", 8)
    counts = Counter(shard_for("c", f"doc-{i}", 8) for i in range(4000))
    assert len(counts) == 8 and min(counts.values()) > 400
    assert shard_for("c", "a", 8) != shard_for("c", "b", 8) or shard_for("c", "a", 8) != shard_for("c", "c", 8)


def test_ids_and_versions_are_deterministic():
    assert chunk_id("c", "d", "v1", 3) == chunk_id("c", "d", "v1", 3) != chunk_id("c", "d", "v1", 4)
    assert chunk_id("c", "d", "v1", 3) != chunk_id("c2", "d", "v1", 3) != chunk_id("c", "d", "v2", 3)
    assert content_version("hello") == content_version("hello") != content_version("hello!")


@pytest.mark.parametrize("raw, reason", [
    (b"", "empty"), (b" \n\t ", "empty"), (b"\x00\x01binary", "binary"),
    ("café".encode("latin-1"), "UTF-8"), (b"x" * 101, "over the limit"),
    (bytes(range(1, 32)) * 3, "binary"),
])
def test_bad_bodies_are_refused_with_a_reason(raw, reason):
    with pytest.raises(BadDocument, match=reason):
        decode_body(raw, max_bytes=100)


def test_good_body_decodes():
    assert decode_body("Grüße\n".encode(), max_bytes=100) == "Grüße\n"
