"""S3's error codes -> astream's errors, shared by the direct reads (:mod:`astream.storage.s3`)
and the SDK path (:mod:`astream.storage.s3sdk`), which must map an answer the same way."""

from __future__ import annotations

from astream.errors import StorageError
from astream.storage.common import error_for_status

__all__ = ["NOT_FOUND", "THROTTLED", "s3_error"]

NOT_FOUND = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound", "404"})
THROTTLED = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded"})


def s3_error(status: int, code: str, url: str) -> StorageError:
    """The astream error for an S3 error answer (its status and ``<Code>``)."""
    if code in NOT_FOUND:
        status = 404
    elif code in THROTTLED:
        status = 429
    return error_for_status(status, url, code)
