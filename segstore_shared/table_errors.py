"""Errors of table segments (Pravega ``contracts/tables``: BadKeyVersion, KeyNotExists, TableSegmentNotEmpty, ...).

Every one names the table segment (``segment``). Conditional failures (:class:`ConditionalTableUpdateError`)
leave the table unchanged: nothing of the batch was written. None of them is retriable as is; a caller
that lost a conditional race re-reads the key and decides again.
"""

from __future__ import annotations

from segstore_shared.contracts import SegmentError, TooLargeError


def _show(key: bytes) -> str:
    return repr(key if len(key) <= 32 else key[:32] + b"...")


class TableError(SegmentError):
    """A table operation failed; ``segment`` names the table segment."""


class ConditionalTableUpdateError(TableError):
    """A condition of an update, removal or deletion did not hold; nothing was changed."""


class TableKeyBadVersionError(ConditionalTableUpdateError):
    """Keys exist with versions other than the ones the batch was conditioned on.

    ``versions`` maps each failing key to ``(expected, actual)``; ``actual`` is the key's current version.
    """

    def __init__(self, segment: str, versions: dict[bytes, tuple[int, int]]) -> None:
        self.versions = versions
        shown = ", ".join(f"{_show(k)} expected {e} actual {a}" for k, (e, a) in list(versions.items())[:5])
        super().__init__(segment, f"version mismatch for {len(versions)} key(s): {shown}")

    @property
    def keys(self) -> list[bytes]:
        return list(self.versions)


class TableKeyNotExistsError(ConditionalTableUpdateError):
    """A key conditioned on a version (not ``NOT_EXISTS``) does not exist."""

    def __init__(self, segment: str, key: bytes) -> None:
        self.key = key
        super().__init__(segment, f"key {_show(key)} does not exist")


class TableSegmentNotEmptyError(ConditionalTableUpdateError):
    """A deletion conditioned on an empty table found keys in it."""

    def __init__(self, segment: str, entry_count: int) -> None:
        self.entry_count = entry_count
        super().__init__(segment, f"table segment holds {entry_count} key(s)")


class InvalidTableKeyError(TableError):
    """A key the table cannot hold (empty, too long, or of the wrong length for a fixed-key table)."""

    def __init__(self, segment: str, key: bytes, message: str = "") -> None:
        self.key_length = len(key)
        super().__init__(segment, message or f"invalid key of {len(key)} bytes")


class TableKeyTooLongError(InvalidTableKeyError):
    """A key longer than :data:`~segment_store.tables.entries.MAX_KEY_BYTES`."""

    def __init__(self, segment: str, key: bytes, maximum: int) -> None:
        self.maximum = maximum
        super().__init__(segment, key, f"key of {len(key)} bytes exceeds the maximum of {maximum}")


class BadKeyLengthError(InvalidTableKeyError):
    """A key whose length differs from a fixed-key table's ``key_length``."""

    def __init__(self, segment: str, key: bytes, expected: int) -> None:
        self.expected = expected
        super().__init__(segment, key, f"key of {len(key)} bytes in a table whose keys are {expected} bytes")


class TableValueTooLongError(TableError):
    """A value longer than :data:`~segment_store.tables.entries.MAX_VALUE_BYTES`."""

    def __init__(self, segment: str, length: int, maximum: int) -> None:
        self.length = length
        self.maximum = maximum
        super().__init__(segment, f"value of {length} bytes exceeds the maximum of {maximum}")


class TableBatchTooLargeError(TableError, TooLargeError):
    """An update or removal batch whose serialization exceeds the configured maximum."""

    def __init__(self, segment: str, length: int, maximum: int) -> None:
        self.length = length
        self.maximum = maximum
        super().__init__(segment, f"batch of {length} bytes exceeds the maximum of {maximum}")


class BadContinuationTokenError(TableError):
    """An iteration continuation token this table did not issue."""


class TableDataCorruptedError(TableError):
    """Bytes of the table segment do not parse as table entries (bad header or checksum) at ``offset``."""

    def __init__(self, segment: str, offset: int, reason: str) -> None:
        self.offset = offset
        super().__init__(segment, f"corrupted table entry at offset {offset}: {reason}")


class TableConfigError(TableError):
    """A table segment cannot be created with these settings (a key length out of range)."""
