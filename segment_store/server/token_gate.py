"""The segment store's check of delegation tokens: every command that carries one, before it runs.

With a verifier (authentication on), a command passes only if its token grants the permission it needs on
each segment it names (``segstore_shared.auth.tokens.TokenVerifier``); otherwise its reply is
``AuthTokenCheckFailed`` with ``TOKEN_EXPIRED`` (the client gets a new token and tries again) or
``TOKEN_CHECK_FAILED`` (invalid, or not allowed: the client must not retry), and the command does nothing.
Without a verifier every command passes (the token, usually empty, is ignored).

Permissions: reads (segment and table reads, info, attributes, chunk lists, offset lookups) need ``READ``;
segstore's ``ReadIngestTimes`` tells no more than a read of the same bytes and needs ``READ``;
segstore's ``ListStorageChunkLocations`` reveals where the segment's chunks are stored (file paths, the S3
endpoint, bucket and keys: the storage layout, never credentials), so it is a read too, and needs no less;
everything that changes data or metadata needs ``READ_UPDATE`` on every segment it touches (a merge: its target
and its sources). Pravega asks only ``READ`` for most changes (``SetupAppend`` and a batch merge's target are
its only ``READ_UPDATE`` checks); here a READ token cannot seal, truncate, delete or change a segment. The
container-wide ``FlushToStorage`` names no segment: only the controller's master token (``*``) passes.
"""

from __future__ import annotations

from segment_store.protocol.commands import (
    AuthTokenCheckFailed,
    AuthTokenErrorCode,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    GetTableSegmentInfo,
    ListStorageChunkLocations,
    ListStorageChunks,
    LocateOffset,
    LocateOffsetAtTime,
    LocateOffsetBeforeTime,
    MergeSegmentsBatch,
    PinChunks,
    ReadIngestTimes,
    ReadSegment,
    ReadTable,
    ReadTableEntries,
    ReadTableEntriesDelta,
    ReadTableKeys,
    UnpinChunks,
)
from segment_store.protocol.registry import WireCommand
from segstore_shared.auth.acl import Permission
from segstore_shared.auth.tokens import TokenError, TokenExpiredError, TokenVerifier

READS = (
    ReadSegment,
    GetStreamSegmentInfo,
    GetSegmentAttribute,
    GetTableSegmentInfo,
    ReadTable,
    ReadTableKeys,
    ReadTableEntries,
    ReadTableEntriesDelta,
    ListStorageChunks,
    ListStorageChunkLocations,
    LocateOffset,
    LocateOffsetAtTime,
    LocateOffsetBeforeTime,
    ReadIngestTimes,
    PinChunks,
    UnpinChunks,
)
_SEGMENT_FIELDS = ("segment", "segment_name", "target", "source", "parent_segment", "target_segment_id")


def segments_named(command: WireCommand) -> list[str]:
    """Every segment ``command`` acts on ("" for a container-wide command)."""
    names = [value for field in _SEGMENT_FIELDS if isinstance(value := getattr(command, field, None), str)]
    if isinstance(command, MergeSegmentsBatch):
        names.extend(command.source_segment_ids)
    return names or [""]


class TokenGate:
    def __init__(self, verifier: TokenVerifier | None) -> None:
        self._verifier = verifier

    @property
    def enabled(self) -> bool:
        return self._verifier is not None

    def refusal(self, command: WireCommand) -> AuthTokenCheckFailed | None:
        """None if ``command`` may run; else the reply that refuses it."""
        token = getattr(command, "delegation_token", None)
        if self._verifier is None or token is None:
            return None
        needed = Permission.READ if isinstance(command, READS) else Permission.READ_UPDATE
        try:
            for segment in segments_named(command):
                self._verifier.check(token, segment, needed)
        except TokenExpiredError as exc:
            return AuthTokenCheckFailed(getattr(command, "request_id", -1), str(exc), AuthTokenErrorCode.TOKEN_EXPIRED)
        except TokenError as exc:
            code = AuthTokenErrorCode.TOKEN_CHECK_FAILED
            return AuthTokenCheckFailed(getattr(command, "request_id", -1), str(exc), code)
        return None
