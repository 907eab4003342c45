"""Where a document's text waits between the producer and the workers.

Celery messages carry only a reference (collection, doc_id, version): a 5 MB body inside a
message would be copied into every retry and redelivery, and bloat the broker. The body is
written once here, read by the chunk and contextualize stages, and removed once the document
is indexed (a failed document's body stays, for a retry, up to ``BODY_TTL_S``).

A file to be extracted in a worker (a PDF, an Office file, HTML) is stored as its original bytes
beside the payload (``put_original``): raw, not base64 in JSON. The chunk stage extracts it,
writes the extracted text into the payload and drops the original.

A file's original bytes are *kept* too once extracted (``keep_original``, on by default:
``SITUATE_KEEP_ORIGINALS``): the search page draws the page a hit cites from them, and links to
the file itself. In Redis they are held under a budget (``SITUATE_KEEP_ORIGINALS_MB``, 512 MB for
all collections), past which a file is not kept (its page cannot be shown, and the page says why);
in S3 there is none. A new version replaces the last one's, a delete or a drop removes it, a
reindex leaves it.

Once indexed, the body of a document's indexed version is *kept*, compressed (``keep``): what a
rebuild of the collection (``situate reindex``: another embedder, chunk size or model) starts
from, without the source. zlib at level 6 takes prose to about a third, and the cost is per
document, not per version: a new version's body replaces the last one's. Setting
``SITUATE_KEEP_TEXT=false`` keeps nothing; a rebuild then reuses the indexed chunks as they are.

Two backends behind one small interface: Redis (default; the broker is already there) and S3
(``SITUATE_BODY_STORE=s3://bucket/prefix``) for corpora too big to sit in Redis memory.
"""

from __future__ import annotations

import json
import zlib
from functools import partial
from hashlib import sha256
from typing import Any, Protocol, cast
from urllib.parse import urlparse

from workers import faults, keys
from workers.connections import redis_bytes_client, s3_client
from workers.settings import get_settings
from workers.storage.scripts import script

# A body nobody picked up within this time is dropped rather than kept in memory forever.
BODY_TTL_S = 7 * 24 * 3600


class BodyStore(Protocol):
    def put(self, collection: str, doc_id: str, version: str, payload: dict[str, Any]) -> None: ...
    def get(self, collection: str, doc_id: str, version: str) -> dict[str, Any] | None: ...
    def put_original(self, collection: str, doc_id: str, version: str, data: bytes | bytearray) -> None: ...
    def get_original(self, collection: str, doc_id: str, version: str) -> bytes | None: ...
    def delete_original(self, collection: str, doc_id: str, version: str) -> None: ...
    def delete(self, collection: str, doc_id: str, version: str) -> None: ...
    def forget_collection(self, collection: str) -> None: ...
    def keep(self, collection: str, doc_id: str, payload: dict[str, Any]) -> None: ...
    def kept(self, collection: str, doc_id: str) -> dict[str, Any] | None: ...
    def forget_kept(self, collection: str, doc_id: str) -> None: ...
    def keep_original(self, collection: str, doc_id: str, version: str, budget: int) -> bool: ...
    def kept_original(self, collection: str, doc_id: str) -> tuple[str, bytes] | None: ...


def encode(payload: dict[str, Any]) -> bytes:
    """A payload as stored: JSON in UTF-8 as it is (a non-ASCII character costs its 2-4 bytes, not
    a 6- or 12-byte escape: budgets are counted in those bytes)."""
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def pack(payload: dict[str, Any]) -> bytes:
    return zlib.compress(encode(payload), 6)


def unpack(data: bytes) -> dict[str, Any]:
    unpacked: dict[str, Any] = json.loads(zlib.decompress(data))
    return unpacked


def _name(collection: str, doc_id: str, version: str) -> str:
    return f"{collection}/{version}/{doc_id}"


class RedisBodyStore:
    def _key(self, collection: str, doc_id: str, version: str) -> str:
        return keys.body(_name(collection, doc_id, version))

    def _original_key(self, collection: str, doc_id: str, version: str) -> str:
        return keys.original(_name(collection, doc_id, version))

    def put(self, collection: str, doc_id: str, version: str, payload: dict[str, Any]) -> None:
        redis_bytes_client().set(self._key(collection, doc_id, version), encode(payload), ex=BODY_TTL_S)

    def get(self, collection: str, doc_id: str, version: str) -> dict[str, Any] | None:
        return self.decode(cast("bytes | None", redis_bytes_client().get(self._key(collection, doc_id, version))))

    def get_on(self, pipe: Any, collection: str, doc_id: str, version: str) -> None:
        """``get`` as a command on a pipeline the caller runs (``working_set``); its reply through
        ``decode``. ``keep_on`` and ``delete_on`` likewise (a client takes them as they are)."""
        pipe.get(self._key(collection, doc_id, version))

    @staticmethod
    def decode(raw: bytes | None) -> dict[str, Any] | None:
        return None if raw is None else cast("dict[str, Any]", json.loads(raw))

    def put_original(self, collection: str, doc_id: str, version: str, data: bytes | bytearray) -> None:
        # a memoryview: redis-py sends it as it is (it refuses a bytearray, and bytes() would copy it)
        redis_bytes_client().set(self._original_key(collection, doc_id, version), memoryview(data), ex=BODY_TTL_S)

    def get_original(self, collection: str, doc_id: str, version: str) -> bytes | None:
        return cast("bytes | None", redis_bytes_client().get(self._original_key(collection, doc_id, version)))

    def delete_original(self, collection: str, doc_id: str, version: str) -> None:
        redis_bytes_client().delete(self._original_key(collection, doc_id, version))

    def delete(self, collection: str, doc_id: str, version: str) -> None:
        self.delete_on(redis_bytes_client(), collection, doc_id, version)

    def delete_on(self, pipe: Any, collection: str, doc_id: str, version: str) -> None:
        pipe.delete(self._key(collection, doc_id, version), self._original_key(collection, doc_id, version))

    def keep(self, collection: str, doc_id: str, payload: dict[str, Any]) -> None:
        self.keep_on(redis_bytes_client(), collection, doc_id, payload)

    def keep_on(self, pipe: Any, collection: str, doc_id: str, payload: dict[str, Any]) -> None:
        pipe.set(keys.kept(f"{collection}/{doc_id}"), pack(payload))

    def kept(self, collection: str, doc_id: str) -> dict[str, Any] | None:
        raw = cast("bytes | None", redis_bytes_client().get(keys.kept(f"{collection}/{doc_id}")))
        return None if raw is None else unpack(raw)

    def forget_kept(self, collection: str, doc_id: str) -> None:
        """The kept body and the kept original (a deleted document)."""
        redis_bytes_client().delete(keys.kept(f"{collection}/{doc_id}"))
        self._forget_original(f"{collection}/{doc_id}")

    def keep_original(self, collection: str, doc_id: str, version: str, budget: int) -> bool:
        name = f"{collection}/{doc_id}"
        kept = script("original_keep")(keys=[self._original_key(collection, doc_id, version), keys.kept_original(name),
                                             keys.kept_original_version(name), keys.ORIGINALS_BYTES],
                                       args=[budget, version])
        return bool(kept == 1)

    def kept_original(self, collection: str, doc_id: str) -> tuple[str, bytes] | None:
        name = f"{collection}/{doc_id}"
        found = cast("list[bytes | None]", redis_bytes_client().mget([keys.kept_original_version(name),
                                                                       keys.kept_original(name)]))
        version, data = found
        return None if version is None or data is None else (version.decode(), data)

    def _forget_original(self, name: str) -> None:
        script("original_forget")(keys=[keys.kept_original(name), keys.kept_original_version(name), keys.ORIGINALS_BYTES])

    def forget_collection(self, collection: str) -> None:
        r = redis_bytes_client()
        for pattern in (keys.body(f"{collection}/*"), keys.original(f"{collection}/*"), keys.kept(f"{collection}/*")):
            for key in r.scan_iter(pattern, count=1000):
                r.delete(key)
        prefix = keys.kept_original("")
        for key in r.scan_iter(keys.kept_original(f"{collection}/*"), count=1000):
            self._forget_original(key.decode()[len(prefix):])


class S3BodyStore:
    """Bodies as S3 objects; credentials from the standard AWS chain, endpoint from
    ``AWS_ENDPOINT_URL_S3`` when set (MinIO and friends). Every call goes through
    ``faults.call``: a timeout or a dropped connection is tried again, a refusal is said."""

    def __init__(self, url: str):
        parsed = urlparse(url)
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.s3 = s3_client()

    def _key(self, collection: str, doc_id: str, version: str, suffix: str = ".json") -> str:
        # doc_ids may hold characters S3 keys dislike: hash them, the payload keeps the id.
        name = f"{collection}/{version}/{sha256(doc_id.encode()).hexdigest()}{suffix}"
        return f"{self.prefix}/{name}" if self.prefix else name

    def _kept_key(self, collection: str, doc_id: str, suffix: str = ".json.z") -> str:
        name = f"{collection}/kept/{sha256(doc_id.encode()).hexdigest()}{suffix}"
        return f"{self.prefix}/{name}" if self.prefix else name

    def _put(self, key: str, body: bytes | bytearray, **extra: Any) -> None:
        faults.call(lambda: self.s3.put_object(Bucket=self.bucket, Key=key, Body=body, **extra), "s3")

    def _get(self, key: str) -> bytes | None:
        def read() -> bytes | None:
            try:
                return cast("bytes", self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
            except self.s3.exceptions.NoSuchKey:
                return None
        return faults.call(read, "s3")

    def _delete(self, key: str) -> None:
        faults.call(lambda: self.s3.delete_object(Bucket=self.bucket, Key=key), "s3")

    def put_original(self, collection: str, doc_id: str, version: str, data: bytes | bytearray) -> None:
        self._put(self._key(collection, doc_id, version, ".original"), data)

    def get_original(self, collection: str, doc_id: str, version: str) -> bytes | None:
        return self._get(self._key(collection, doc_id, version, ".original"))

    def delete_original(self, collection: str, doc_id: str, version: str) -> None:
        self._delete(self._key(collection, doc_id, version, ".original"))

    def put(self, collection: str, doc_id: str, version: str, payload: dict[str, Any]) -> None:
        self._put(self._key(collection, doc_id, version), encode(payload), ContentType="application/json")

    def get(self, collection: str, doc_id: str, version: str) -> dict[str, Any] | None:
        raw = self._get(self._key(collection, doc_id, version))
        return None if raw is None else json.loads(raw)

    def delete(self, collection: str, doc_id: str, version: str) -> None:
        self._delete(self._key(collection, doc_id, version))
        self.delete_original(collection, doc_id, version)

    def keep(self, collection: str, doc_id: str, payload: dict[str, Any]) -> None:
        self._put(self._kept_key(collection, doc_id), pack(payload))

    def kept(self, collection: str, doc_id: str) -> dict[str, Any] | None:
        raw = self._get(self._kept_key(collection, doc_id))
        return None if raw is None else unpack(raw)

    def forget_kept(self, collection: str, doc_id: str) -> None:
        self._delete(self._kept_key(collection, doc_id))
        self._delete(self._kept_key(collection, doc_id, ".original"))

    def keep_original(self, collection: str, doc_id: str, version: str, budget: int) -> bool:
        """Copied within the bucket to the document's kept place (S3 has no budget of ours)."""
        source = {"Bucket": self.bucket, "Key": self._key(collection, doc_id, version, ".original")}
        target = self._kept_key(collection, doc_id, ".original")
        faults.call(lambda: self.s3.copy_object(Bucket=self.bucket, Key=target, CopySource=source,
                                                Metadata={"version": version}, MetadataDirective="REPLACE"), "s3")
        self.delete_original(collection, doc_id, version)
        return True

    def kept_original(self, collection: str, doc_id: str) -> tuple[str, bytes] | None:
        key = self._kept_key(collection, doc_id, ".original")

        def read() -> tuple[str, bytes] | None:
            try:
                obj = self.s3.get_object(Bucket=self.bucket, Key=key)
            except self.s3.exceptions.NoSuchKey:
                return None
            return str(obj.get("Metadata", {}).get("version", "")), cast("bytes", obj["Body"].read())
        return faults.call(read, "s3")

    def forget_collection(self, collection: str) -> None:
        prefix = f"{self.prefix}/{collection}/" if self.prefix else f"{collection}/"

        def one_page(token: str | None) -> str | None:
            page = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=prefix,
                                           **({"ContinuationToken": token} if token else {}))
            objects = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if objects:
                self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": objects})
            return page.get("NextContinuationToken") if page.get("IsTruncated") else None

        token: str | None = None
        while True:
            token = faults.call(partial(one_page, token), "s3")
            if not token:
                return


_store: BodyStore | None = None


def body_store() -> BodyStore:
    global _store
    if _store is None:
        url = get_settings().body_store
        _store = S3BodyStore(url) if url.startswith("s3://") else RedisBodyStore()
    return _store
