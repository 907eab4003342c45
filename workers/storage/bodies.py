"""Where a document's text waits between the producer and the workers.

Celery messages carry only a reference (collection, doc_id, version): a 5 MB body inside a
message would be copied into every retry and redelivery, and bloat the broker. The body is
written once here, read by the chunk and contextualize stages, and removed once the document
is indexed (a failed document's body stays, for a retry, up to ``BODY_TTL_S``).

Two backends behind one small interface: Redis (default; the broker is already there) and S3
(``SITUATE_BODY_STORE=s3://bucket/prefix``) for corpora too big to sit in Redis memory.
"""

from __future__ import annotations

import json
from typing import Any, Protocol
from urllib.parse import urlparse

from workers.connections import redis_bytes_client
from workers.settings import get_settings

# A body nobody picked up within this time is dropped rather than kept in memory forever.
BODY_TTL_S = 7 * 24 * 3600


class BodyStore(Protocol):
    def put(self, collection: str, doc_id: str, version: str, payload: dict[str, Any]) -> None: ...
    def get(self, collection: str, doc_id: str, version: str) -> dict[str, Any] | None: ...
    def delete(self, collection: str, doc_id: str, version: str) -> None: ...
    def forget_collection(self, collection: str) -> None: ...


def _name(collection: str, doc_id: str, version: str) -> str:
    return f"{collection}/{version}/{doc_id}"


class RedisBodyStore:
    def _key(self, collection: str, doc_id: str, version: str) -> str:
        return "situate:body:" + _name(collection, doc_id, version)

    def put(self, collection, doc_id, version, payload):
        redis_bytes_client().set(self._key(collection, doc_id, version), json.dumps(payload).encode(), ex=BODY_TTL_S)

    def get(self, collection, doc_id, version):
        raw = redis_bytes_client().get(self._key(collection, doc_id, version))
        return None if raw is None else json.loads(raw)

    def delete(self, collection, doc_id, version):
        redis_bytes_client().delete(self._key(collection, doc_id, version))

    def forget_collection(self, collection):
        r = redis_bytes_client()
        for key in r.scan_iter(f"situate:body:{collection}/*", count=1000):
            r.delete(key)


class S3BodyStore:
    """Bodies as S3 objects; credentials from the standard AWS chain, endpoint from
    ``AWS_ENDPOINT_URL_S3`` when set (MinIO and friends)."""

    def __init__(self, url: str):
        import boto3

        parsed = urlparse(url)
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.s3 = boto3.client("s3")

    def _key(self, collection, doc_id, version):
        from hashlib import sha256

        # doc_ids may hold characters S3 keys dislike: hash them, the payload keeps the id.
        name = f"{collection}/{version}/{sha256(doc_id.encode()).hexdigest()}.json"
        return f"{self.prefix}/{name}" if self.prefix else name

    def put(self, collection, doc_id, version, payload):
        self.s3.put_object(Bucket=self.bucket, Key=self._key(collection, doc_id, version),
                           Body=json.dumps(payload).encode(), ContentType="application/json")

    def get(self, collection, doc_id, version):
        try:
            obj = self.s3.get_object(Bucket=self.bucket, Key=self._key(collection, doc_id, version))
        except self.s3.exceptions.NoSuchKey:
            return None
        return json.loads(obj["Body"].read())

    def delete(self, collection, doc_id, version):
        self.s3.delete_object(Bucket=self.bucket, Key=self._key(collection, doc_id, version))

    def forget_collection(self, collection):
        prefix = f"{self.prefix}/{collection}/" if self.prefix else f"{collection}/"
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if keys:
                self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": keys})


_store: BodyStore | None = None


def body_store() -> BodyStore:
    global _store
    if _store is None:
        url = get_settings().body_store
        _store = S3BodyStore(url) if url.startswith("s3://") else RedisBodyStore()
    return _store
