"""Every Redis key situate writes, named in one place.

All of them start with ``PREFIX``, so one Redis can serve other applications beside us, and
``redis-cli --scan --pattern 'situate:*'`` lists what is ours. A family of keys is a function
of the ids it is per (collection, document, version); passing ``"*"`` for an id gives the
pattern that ``SCAN`` needs to find the family's keys of one collection. Families that a module
owns whole (metrics, fair lines, workers online, sessions) get a prefix here and their layout
below it here too. The Lua scripts (``storage/lua``) receive their keys as ``KEYS``, or, where
they meet names only inside Redis (the fair gate's rings), the layout to build them from
(``FAIR_LAYOUT``): this module is the whole list, Kombu's keys included.
"""

from __future__ import annotations

PREFIX = "situate:"


def _key(*parts: object) -> str:
    return PREFIX + ":".join(str(p) for p in parts)


def namespace(family: str) -> str:
    """The prefix of a family laid out by the module that owns it (``situate:metrics:``)."""
    return _key(family) + ":"


# Collections (storage/catalog.py)
COLLECTIONS = _key("collections")  # the set of their names (generations being built included)
DROPPING = _key("droppings")  # the set of those whose drop has not finished
CATALOG_INDEXED = _key("collections", "indexed")  # the sets were filled from a scan, once


def collection(name: str) -> str:
    return _key("collection", name)


def dropping(name: str) -> str:
    """A collection's tombstone while its drop is not finished."""
    return _key("dropping", name)


def mix(name: str) -> str:
    """Counts of code and prose chunks: the fusion's default weight."""
    return _key("mix", name)


# Documents (storage/states.py)
def doc(collection: str, doc_id: str) -> str:
    return _key("doc", collection, doc_id)


def counts(collection: str) -> str:
    return _key("counts", collection)


def docs(collection: str) -> str:
    return _key("docs", collection)


def seq(collection: str) -> str:
    return _key("seq", collection)


def doc_lock(collection: str, doc_id: str) -> str:
    return _key("doclock", collection, doc_id)


MOVING = _key("moving")  # in-flight documents by when they last moved (the reconciler's)


BACKLOG = _key("backlog", "bytes")  # what the documents in flight weigh, against SITUATE_BACKLOG_MB


def failed(collection: str) -> str:
    """A collection's failed documents by when they failed: ``situate failed`` reads a page of it."""
    return _key("failed", collection)


def failed_indexed(collection: str) -> str:
    """The failed index was filled from a scan, once (a collection older than the index)."""
    return _key("failed", collection, "indexed")


# What a document's stages hand on (storage/bodies.py, storage/checkpoints.py)
def body(name: str) -> str:
    return _key("body", name)


def original(name: str) -> str:
    """A file's original bytes, until they are extracted."""
    return _key("original", name)


def kept(name: str) -> str:
    """An indexed document's body, compressed, for rebuilding its collection (one per document)."""
    return _key("kept", name)


def kept_original(name: str) -> str:
    """An indexed file's original bytes, kept for its pages to be shown (the search page)."""
    return _key("keptorig", name)


def kept_original_version(name: str) -> str:
    return _key("keptorigv", name)


ORIGINALS_BYTES = _key("keptorig-bytes")  # what every kept original takes, against its budget


def chunks(collection: str, version: str, doc_id: str) -> str:
    return _key("chunks", collection, version, doc_id)


def contexts(collection: str, version: str, doc_id: str) -> str:
    return _key("ctx", collection, version, doc_id)


# Deliveries (pipeline/guard.py, pipeline/tasks.py)
def lease(collection: str, version: str, doc_id: str, stage: str) -> str:
    return _key("lease", collection, version, doc_id, stage)


def deliveries(task_id: str, retries: int) -> str:
    return _key("deliveries", task_id, retries)


def death(task_id: str, retries: int) -> str:
    """How a message's last delivery died (a signal), for the document's error."""
    return _key("lost", task_id, retries)


def warm(collection: str, version: str, doc_id: str) -> str:
    """A document whose prompt prefix was written to the provider's cache (its TTL's)."""
    return _key("warm", collection, version, doc_id)


RECONCILER = _key("reconciler")  # the lease of the worker running the reconciler
BATCH_TENDER = _key("batches", "tender")  # the lease of the worker tending Message Batches

# Message Batches grouped across documents (storage/batch_pool.py)
BATCH_POOL = _key("batches", "pool")  # the documents' steps waiting for the next batch, oldest first
BATCH_POOL_SIZE = _key("batches", "pool", "size")  # {requests, bytes} of what the pool holds
BATCH_WAITING = _key("batches", "waiting")  # the documents (collection \x1f id) in the pool or a batch
BATCHES_OPEN = _key("batches", "open")  # batch id -> what it holds, while it runs
BATCH_CREATING = _key("batches", "creating")  # a batch being created: what it holds, until recorded
BATCH_SCHEDULED = _key("batches", "scheduled")  # when the next tend is due (wall clock)


def batch_members(batch_id: str) -> str:
    """A batch's requests, in order: its results' ``custom_id`` is an index into them."""
    return _key("batches", "members", batch_id)
# One-chunk documents waiting to be contextualized, or indexed, together (storage/bundle_pool.py)
BUNDLE_WAITING = _key("bundles", "waiting")  # the documents (collection \x1f id) in a pool


def bundle_pool(collection: str, stage: str) -> str:
    """A collection's one-chunk documents ready for ``stage`` (``index``, ``contextualize``), oldest first."""
    return _bundle_key("pool", collection, stage)


def bundle_pool_bytes(collection: str, stage: str) -> str:
    """What a collection's pool for ``stage`` weighs (its documents' chunk text)."""
    return _bundle_key("bytes", collection, stage)


def _bundle_key(kind: str, collection: str, stage: str) -> str:
    # The index stage's keep the names they had before the contextualize stage had a pool: a pool
    # left in Redis across an upgrade is still collected.
    return _key("bundles", kind if stage == "index" else f"{kind}-{stage}", collection)


def bundle_taken(bundle_id: str) -> str:
    """What a collector took from a pool for its bundle, until the bundle is sent (a collector
    delivered again sends the same one)."""
    return _key("bundles", "taken", bundle_id)


REBUILDER = _key("rebuilder")  # the lease of the worker advancing reindexes

# Idle indices merged into few segments (storage/compaction.py)
COMPACTOR = _key("compactor")  # the turn of the worker running a compaction pass
COMPACTION_SEEN = _key("compaction", "seen")  # index -> its writes at the previous pass
COMPACTED = _key("compaction", "merged")  # index -> {writes, at} when it was last merged


def reindex(collection: str) -> str:
    """A collection's reindex in progress (or its previous generation, kept for a rollback)."""
    return _key("reindex", collection)


def reindex_touched(collection: str) -> str:
    """Documents submitted, retried or deleted since a reindex began: to bring across again."""
    return _key("reindex", collection, "touched")


def labels(collection: str) -> str:
    """A collection's labelled questions, by id (storage/labels.py)."""
    return _key("labels", collection)


# The bill (contextualizers/llm/usage.py) and the rate limits (…/ratelimit.py)
USAGE_ALL = _key("usage", "_all")


def usage_written(writer: str) -> str:
    """A bitmap of the bill writes one process has made, by number: each applied once."""
    return _key("bill", "written", writer)


def usage(collection: str, run: str | None = None) -> str:
    return _key("usage", collection, "run", run) if run else _key("usage", collection)


def runs(collection: str) -> str:
    return _key("runs", collection)


def rate_bucket(scope: str, dimension: str) -> str:
    return _key("rl", scope, dimension)


# Replicas of the openai contextualizer's servers (storage/replicas.py), each by its label (its
# base URL without credentials): calls in flight on it, those holding one of its slots, and
# which replica a document's calls go to.
REPLICAS_LISTED = _key("replicas", "listed")  # label -> when a worker last listed it: what /metrics reads
REPLICAS_LISTS = _key("replicas", "lists")  # fingerprint of a worker's list -> when last announced
REPLICAS_LIST = _key("replicas", "list")  # fingerprint -> the labels it lists (JSON)
REPLICAS_KNOWN_BEFORE = _key("replicas", "known")  # a set of labels, replaced by REPLICAS_LISTED: removed
REPLICAS_DOWN = _key("replicas", "down")  # label -> "until|failures": left alone, then probed
REPLICAS_MOVES = _key("replicas", "moves")  # label -> documents moved away from it
REPLICAS_TURN = _key("replicas", "turn")  # the round-robin routing's counter
REPLICA_PROBE = _key("replica", "probe") + ":"  # + label: one worker's claim to probe a replica that was down


def replica_load(label: str) -> str:
    """The calls sent to a replica and not yet answered (waiting for a slot, or in one), by when
    each entry lapses (a worker lost mid-call)."""
    return _key("replica", "load", label)


def replica_slots(label: str) -> str:
    """The calls holding one of a replica's slots (``SITUATE_OPENAI_REPLICA_CONCURRENCY``)."""
    return _key("replica", "slots", label)


def replica_line(label: str) -> str:
    """The calls waiting for one of a replica's slots, by when each arrived: served in that order."""
    return _key("replica", "line", label)


REPLICA_WAKE = _key("replica", "wake") + ":"  # + call: a waiting call's wake-up, pushed when a slot frees


def replica_of(document: str) -> str:
    """The replica a document's calls go to (``document``: collection and id)."""
    return _key("replica", "of", document)


TOKENS = _key("tokens")  # API tokens by SHA-256 (storage/tokens.py)
METRICS = namespace("metrics")

# The fair gate (storage/fairqueue.py): a line of parked work per (queue, collection), a ring of
# the collections with work waiting and their debts per queue. Its Lua scripts meet collections
# in a ring, so they cannot be handed every line as KEYS: they receive ``FAIR_LAYOUT`` and
# build a line, ring or debt key exactly as the functions below do.
FAIR = namespace("fair")
FAIR_LINE, FAIR_RING, FAIR_DEBT = ":c:", ":ring", ":debt"
FAIR_LAYOUT = (FAIR, FAIR_LINE, FAIR_RING, FAIR_DEBT)
FAIR_SENDING, FAIR_SENDING_DATA = FAIR + "sending", FAIR + "sending:data"  # admitted, not yet received
FAIR_WAITING, FAIR_WAITING_TOTAL = FAIR + "waiting", FAIR + "waiting:total"  # entries per document
FAIR_QUEUED = FAIR + "queued"  # queue -> admitted entries no worker has received yet: what it holds ahead


def fair_line(queue: str, collection: str) -> str:
    return FAIR + queue + FAIR_LINE + collection


def fair_ring(queue: str) -> str:
    return FAIR + queue + FAIR_RING


def fair_debts(queue: str) -> str:
    return FAIR + queue + FAIR_DEBT


# Kombu's own keys (its Redis transport; pipeline/sending.py passes these names to it, so they
# are set here, not assumed): messages delivered and not acknowledged, by delivery tag, and when
# each was delivered. Unprefixed, as Kombu has always named them: a rename would strand the
# messages of a deployment upgraded while some were in flight.
KOMBU_UNACKED, KOMBU_UNACKED_INDEX, KOMBU_UNACKED_MUTEX = "unacked", "unacked_index", "unacked_mutex"

WORKERS = namespace("workers")
WORKERS_ONLINE = _key("workers-online")  # hostnames by when their record lapses (storage/presence.py)
SESSIONS = namespace("sessions")


def session(digest: str) -> str:
    """A browser session, by the SHA-256 of its id (storage/sessions.py)."""
    return SESSIONS + digest
