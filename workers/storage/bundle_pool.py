"""Each collection's one-chunk documents waiting to be contextualized, or indexed, together
(``pipeline/bundling.py``): a pool per collection and stage.

A pool is a list in Redis, oldest first, with its weight beside it; a collector takes a bundle
from its head (``take``), bounded by documents and by bytes. What a collector took is remembered
under its bundle's id for a day, so that a collector delivered again (its worker died) sends the
same bundle rather than losing it. ``waiting`` says which documents sit in a pool, for the
reconciler: a document there has work waiting, not lost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from workers import keys
from workers.connections import redis_client
from workers.storage import states
from workers.storage.scripts import script

# The stages that bundle: a document goes through the first pool, then the second.
CONTEXTUALIZE, INDEX = "contextualize", "index"
STAGES = (CONTEXTUALIZE, INDEX)

# Long past any bundle's run: what was taken is forgotten once sent, and never matters after a day.
TAKEN_TTL_S = 86_400


@dataclass(frozen=True)
class Member:
    """A document of a bundle, at the version its message named."""

    doc_id: str
    version: str
    nbytes: int = 0

    def to_json(self) -> list[str]:
        return [self.doc_id, self.version]


def add(stage: str, collection: str, doc_id: str, version: str, nbytes: int) -> tuple[int, int, int]:
    """Put a document in its collection's pool for ``stage``; the documents and bytes the pool
    holds now, and the collection's documents in flight, the pool's included."""
    size, weight, flying = script("bundle_add")(
        keys=[keys.bundle_pool(collection, stage), keys.bundle_pool_bytes(collection, stage), keys.BUNDLE_WAITING,
              keys.counts(collection)],
        args=[json.dumps([doc_id, version, nbytes]), states.member(collection, doc_id), nbytes])
    return int(size), int(weight), int(flying)


def take(stage: str, collection: str, bundle_id: str, most: int, heaviest: int) -> tuple[list[Member], int]:
    """The oldest documents of the pool for ``stage``, ``most`` at most and ``heaviest`` bytes at most (one at
    least), for bundle ``bundle_id`` — the same ones again if it took them already; and how
    many documents are left in the pool."""
    entries, left = script("bundle_take")(keys=[keys.bundle_pool(collection, stage),
                                                keys.bundle_pool_bytes(collection, stage), keys.BUNDLE_WAITING,
                                                keys.bundle_taken(bundle_id)],
                                          args=[most, heaviest, collection, TAKEN_TTL_S])
    members = [Member(str(d), str(v), int(n)) for d, v, n in (json.loads(e) for e in entries)]
    return members, int(left)


def sent(bundle_id: str) -> None:
    """The bundle's message is on its way: what it took need not be remembered."""
    redis_client().delete(keys.bundle_taken(bundle_id))


def waiting(members: list[str]) -> list[bool]:
    """For each document (``collection \\x1f id``): does it sit in a pool?"""
    if not members:
        return []
    return [bool(x) for x in redis_client().smismember(keys.BUNDLE_WAITING, members)]


def forget_collection(collection: str) -> None:
    """A dropped collection's pools go with it."""
    client = redis_client()
    pools = [keys.bundle_pool(collection, stage) for stage in STAGES]
    entries = [e for pool in pools for e in client.lrange(pool, 0, -1)]
    found = [states.member(collection, json.loads(e)[0]) for e in entries]
    pipe = client.pipeline(transaction=False)
    if found:
        pipe.srem(keys.BUNDLE_WAITING, *found)
    pipe.delete(*pools, *(keys.bundle_pool_bytes(collection, stage) for stage in STAGES))
    pipe.execute()
