"""When an idle pass merges an index (``compaction.due``): idle, too many segments, and enough
written since its last merge."""

from __future__ import annotations

from workers.storage.compaction import SEGMENT_BYTES, IndexShape, due, target_segments


def shape(segments: int = 12, writes: int = 1000, documents: int = 1000, merging: int = 0,
          store_bytes: int = 50 * 1024**2) -> IndexShape:
    return IndexShape(index="situate-x", segments=segments, store_bytes=store_bytes, documents=documents,
                      writes=writes, merging=merging)


def test_an_index_is_merged_only_once_a_whole_pass_went_by_without_a_write():
    assert due(shape(), seen_writes=1000, merged_writes=None)
    assert not due(shape(), seen_writes=990, merged_writes=None)  # written since the previous pass
    assert not due(shape(), seen_writes=None, merged_writes=None)  # not seen before: idle since when?


def test_an_index_already_merging_or_as_few_segments_as_it_needs_is_left():
    assert not due(shape(merging=1), seen_writes=1000, merged_writes=None)
    assert not due(shape(segments=1), seen_writes=1000, merged_writes=None)
    big = 12 * 1024**3  # three segments' worth
    assert target_segments(big) == 3
    assert not due(shape(segments=3, store_bytes=big), seen_writes=1000, merged_writes=None)
    assert due(shape(segments=4, store_bytes=big), seen_writes=1000, merged_writes=None)


def test_a_trickle_into_a_merged_index_waits_for_a_share_of_its_documents():
    merged_at = 100_000
    trickle = shape(segments=2, documents=100_000, writes=merged_at + 200)
    assert not due(trickle, seen_writes=trickle.writes, merged_writes=merged_at)
    enough = shape(segments=9, documents=100_000, writes=merged_at + 5_000)
    assert due(enough, seen_writes=enough.writes, merged_writes=merged_at)


def test_counts_that_started_again_read_as_never_merged():
    # OpenSearch's write counts start from zero when a node restarts: lower than the record.
    restarted = shape(writes=300, documents=100_000)
    assert due(restarted, seen_writes=300, merged_writes=90_000)


def test_targets_follow_lucenes_largest_merged_segment():
    assert target_segments(0) == 1
    assert target_segments(SEGMENT_BYTES) == 1
    assert target_segments(SEGMENT_BYTES + 1) == 2
