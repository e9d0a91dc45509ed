"""The pyiceberg FileIO settings that let a table's readers and its maintainer open chunk files in S3 Tier-2.

A table on S3 Tier-2 names its data files by their ``s3://bucket/key`` URI (:func:`~.stream_table.file_path`: the
key as it is in the bucket, no endpoint in it); the maintainer opens them (Parquet footers, the truncation boundary
chunk's rows) with pyiceberg's FileIO configured from the segment store's own Tier-2 settings, so there is one
place to say where S3 is and who we are (``--s3-endpoint``, ``--s3-region``, ``AWS_*``). Settings left unset are
left to pyarrow's S3 defaults (which read the same ``AWS_*`` environment variables boto3 does).
"""

from __future__ import annotations

from segment_store.storage.tier2_config import Tier2Config


def file_io_properties(tier2: Tier2Config) -> dict[str, str]:
    """pyiceberg catalog properties (``s3.endpoint``, ``s3.region``, ``s3.access-key-id``, ...) for ``tier2``;
    empty for filesystem Tier-2. Holds secrets: never log it."""
    if tier2.backend != "s3":
        return {}
    given = {
        "s3.endpoint": tier2.s3_endpoint,
        "s3.region": tier2.s3_region,
        "s3.access-key-id": tier2.s3_access_key_id,
        "s3.secret-access-key": tier2.s3_secret_access_key,
        "s3.session-token": tier2.s3_session_token,
    }
    return {key: value for key, value in given.items() if value}


__all__ = ["file_io_properties"]
