"""``situate ingest -c C s3://bucket/prefix``: one object, one document; only what changed.

A bucket re-ingested nightly should cost what changed, in downloads as in LLM calls. The
content version already keeps an unchanged document from being paid again, but it needs the
body, so every object would be downloaded; S3's ETag says whether an object changed without
reading it. The ETag an object was read at is kept in its document's state (``states.annotate``,
forgotten with it); an object whose ETag is the one recorded, and whose document is not
failed, is skipped unread. The document id is ``s3://bucket/key``.

Any S3-compatible store works: credentials from the standard AWS chain, the endpoint from
``AWS_ENDPOINT_URL_S3`` (MinIO, Ceph, moto), as boto3 reads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import PurePosixPath
from typing import Any, cast

from producers.ingest.loaders import BINARY_SUFFIXES, too_big
from workers import faults
from workers.connections import s3_client
from workers.documents.validation import RawDocument
from workers.errors import ProviderRefused, ProviderUnavailable
from workers.settings import get_settings
from workers.storage import states

SCHEME = "s3://"


def is_s3(path: str) -> bool:
    return path.startswith(SCHEME)


def parse(url: str) -> tuple[str, str]:
    bucket, _, prefix = url[len(SCHEME):].partition("/")
    if not bucket:
        raise ValueError(f"{url!r}: expected s3://bucket or s3://bucket/prefix")
    return bucket, prefix


@dataclass
class Listing:
    """What a pass over a prefix found; filled while ``documents`` is consumed."""

    objects: int = 0
    skipped: int = 0  # unchanged since this collection took them: not downloaded
    ignored: int = 0  # binary suffixes, folder markers
    # doc_id -> the ETag it was read at. Not in the metadata: a copy of the same bytes (a
    # multipart upload) has another ETag, and must not look like a changed document.
    etags: dict[str, str] = field(default_factory=dict)
    present: set[str] = field(default_factory=set)  # every document the prefix holds (for --sync)


def documents(collection: str, url: str, listing: Listing | None = None, client: Any = None) -> Iterator[RawDocument]:
    """The prefix's objects that changed since this collection last took them, as documents
    (``remember`` each once accepted)."""
    s3 = client or s3_client()
    bucket, prefix = parse(url)
    listing = listing if listing is not None else Listing()
    for page in _pages(s3, bucket, prefix):
        objects = [o for o in page.get("Contents", [])]
        listing.objects += len(objects)
        wanted = [o for o in objects if not o["Key"].endswith("/")
                  and PurePosixPath(o["Key"]).suffix.lower() not in BINARY_SUFFIXES]
        listing.ignored += len(objects) - len(wanted)
        ids = [f"{SCHEME}{bucket}/{o['Key']}" for o in wanted]
        listing.present.update(ids)
        for obj, doc_id, (state, etag) in zip(wanted, ids, states.fields_of(collection, ids, "state", "etag")):
            if etag == obj["ETag"] and state not in (None, states.FAILED):
                listing.skipped += 1
                continue
            metadata = {"source": doc_id}
            listing.etags[doc_id] = obj["ETag"]
            error = too_big(int(obj.get("Size") or 0))
            if error:  # from the listing: a 50 GB object is never downloaded to find out
                yield RawDocument(doc_id, None, metadata, error=error)
                continue
            try:
                body = faults.call(partial(_read, s3, bucket, obj), "s3")
            except (ProviderRefused, ProviderUnavailable) as e:  # gone or changed meanwhile: this one fails alone
                yield RawDocument(doc_id, None, metadata, error=f"cannot read {doc_id}: {e}")
                continue
            yield RawDocument(doc_id, body, metadata, name=PurePosixPath(obj["Key"]).name)


def _pages(s3: Any, bucket: str, prefix: str) -> Iterator[dict[str, Any]]:
    """The listing, a page at a time, each page's call retried on its own (``faults.call``)."""
    token: str | None = None
    while True:
        extra = {"ContinuationToken": token} if token else {}
        page: dict[str, Any] = faults.call(partial(s3.list_objects_v2, Bucket=bucket, Prefix=prefix, **extra), "s3")
        yield page
        token = page.get("NextContinuationToken") if page.get("IsTruncated") else None
        if not token:
            return


def _read(s3: Any, bucket: str, obj: dict[str, Any]) -> bytes:
    """The object at the version listed (``IfMatch``), at most one byte past the size limit."""
    stream = s3.get_object(Bucket=bucket, Key=obj["Key"], IfMatch=obj["ETag"])["Body"]
    try:
        return cast("bytes", stream.read(get_settings().max_document_bytes + 1))
    finally:
        stream.close()


def remember(collection: str, doc_id: str, listing: Listing) -> None:
    """After ``doc_id`` was accepted (queued or unchanged): skip its object until its ETag changes."""
    etag = listing.etags.pop(doc_id, None)
    if etag:
        states.annotate(collection, doc_id, etag=etag)
