"""Key-value tables as Pravega defines them: configuration, names, keys, versions, entries and modifications.

A key-value table (KVT) ``scope/K`` is ``partition_count`` table segments with fixed-length keys, named as
Pravega's ``NameUtils.getQualifiedTableSegmentName`` names them: ``scope/K_kvtable/<n>.#epoch.0`` for partitions
``n = first .. first + partition_count - 1`` (``first`` is 0 for a new name, and above every partition of a
deleted table of the same name). A table key is a primary key of exactly ``primary_key_length`` bytes and a
secondary key of exactly ``secondary_key_length`` bytes (possibly 0); on its table segment the key is the two
concatenated (Pravega's ``TableEntryHelper.serializeKey``), so a table segment's key length is their sum, at most
256 (the segment store's longest fixed key). The primary key alone chooses the partition (``kvt_routing``), so
all keys of one primary key live in one table segment: updates of one primary key can be atomic, and the keys
of one primary key iterate in order.

A :class:`Version` is the key's version in its table segment together with that segment's id (Java's
``VersionImpl``, written ``"<segment id>:<version>"``); :data:`NOT_EXISTS` conditions an update on the key being
absent, :data:`NO_VERSION` means "unconditional".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from controller_client.model import MAX_NAME_LENGTH, InvalidModelError, qualified_segment_name, validate_scope_name

KVTABLE_SUFFIX = "_kvtable"
"""Pravega's ``NameUtils.KVTABLE_SUFFIX``: the stream part of a KVT's table segment names is ``<K>_kvtable``."""
MAX_TOTAL_KEY_LENGTH = 256
"""The longest fixed key of a table segment (the segment store's ``MAX_FIXED_KEY_LENGTH``)."""
MAX_PARTITIONS = 1024
"""segstore's bound on ``partition_count`` (Pravega has none): each partition is a table segment."""
MAX_KVT_NAME_LENGTH = MAX_NAME_LENGTH - len(KVTABLE_SUFFIX)
MAX_VALUE_LENGTH = 1024 * 1024 - 8192
"""Pravega's ``KeyValueTable.MAXIMUM_VALUE_LENGTH`` (1 MiB less the longest key)."""
NO_SEGMENT_ID = -(2**63)
_NO_VERSION = -(2**63)
_NOT_EXISTS = -1
_KVT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")


def validate_kvt_name(name: str) -> str:
    """A key-value table name: letters, digits, ``.`` and ``-`` (Pravega's user stream rule: no ``_``, so a
    table's segment names never meet another table's), at most 247 characters (its segments' stream name,
    ``<K>_kvtable``, must be a name of at most 255)."""
    if not isinstance(name, str) or not name:
        raise InvalidModelError("key-value table: name must be a non-empty string")
    if len(name) > MAX_KVT_NAME_LENGTH:
        raise InvalidModelError(f"key-value table: name longer than {MAX_KVT_NAME_LENGTH} characters")
    if not _KVT_NAME.match(name):
        raise InvalidModelError(f"key-value table: invalid name {name!r} (letters, digits, '.', '-' only)")
    return name


def validate_kvt(scope: str, name: str) -> tuple[str, str]:
    return validate_scope_name(scope), validate_kvt_name(name)


def table_segment_stream(kvt: str) -> str:
    """``<K>_kvtable``: the stream part of the table segments' names, and what their delegation tokens name."""
    return kvt + KVTABLE_SUFFIX


def table_segment_name(scope: str, kvt: str, segment_id: int) -> str:
    """``scope/K_kvtable/<number>.#epoch.<epoch>`` (Pravega's ``getQualifiedTableSegmentName``)."""
    return qualified_segment_name(scope, table_segment_stream(kvt), segment_id)


def kvt_of_stream(stream: str) -> str | None:
    """``K`` if ``stream`` is ``K_kvtable`` for a valid table name ``K``, else None."""
    if not stream.endswith(KVTABLE_SUFFIX):
        return None
    name = stream[: -len(KVTABLE_SUFFIX)]
    return name if name and len(name) <= MAX_KVT_NAME_LENGTH and _KVT_NAME.match(name) else None


@dataclass(frozen=True, slots=True)
class KeyValueTableConfiguration:
    """Pravega's ``KeyValueTableConfiguration``: partitions (table segments) and key lengths, fixed at creation."""

    partition_count: int
    primary_key_length: int
    secondary_key_length: int = 0
    rollover_size_bytes: int = 0
    """Tier-2 chunk size of the table segments (0: the segment store's default)."""

    def __post_init__(self) -> None:
        if not 0 < self.partition_count <= MAX_PARTITIONS:
            raise InvalidModelError(f"partition_count: must be in [1, {MAX_PARTITIONS}], not {self.partition_count}")
        if self.primary_key_length <= 0:
            raise InvalidModelError(f"primary_key_length: must be positive, not {self.primary_key_length}")
        if self.secondary_key_length < 0:
            raise InvalidModelError(f"secondary_key_length: must not be negative, not {self.secondary_key_length}")
        if self.total_key_length > MAX_TOTAL_KEY_LENGTH:
            raise InvalidModelError(
                f"primary_key_length + secondary_key_length: at most {MAX_TOTAL_KEY_LENGTH}, "
                f"not {self.total_key_length}"
            )
        if self.rollover_size_bytes < 0:
            raise InvalidModelError(f"rollover_size_bytes: must not be negative, not {self.rollover_size_bytes}")

    @property
    def total_key_length(self) -> int:
        return self.primary_key_length + self.secondary_key_length


@dataclass(frozen=True, slots=True)
class TableKey:
    """A key: ``primary`` (exactly the table's primary key length) and ``secondary`` (exactly its secondary key
    length; ``b""`` for a table without secondary keys)."""

    primary: bytes
    secondary: bytes = b""


@dataclass(frozen=True, slots=True)
class Version:
    """A key's version: its table segment's id and its version there. Compare with ``==``; ``str()`` gives
    Java's ``"<segment id>:<version>"`` and :meth:`from_string` reads it back."""

    segment_id: int
    segment_version: int

    def __str__(self) -> str:
        return f"{self.segment_id}:{self.segment_version}"

    @classmethod
    def from_string(cls, text: str) -> Version:
        parts = text.split(":")
        try:
            if len(parts) == 2:
                return cls(int(parts[0]), int(parts[1]))
        except ValueError:
            pass
        raise InvalidModelError(f"version: not '<segment id>:<version>': {text!r}")

    @property
    def is_condition(self) -> bool:
        """Whether an update with this version is conditional (anything but :data:`NO_VERSION`)."""
        return self.segment_version != _NO_VERSION


NO_VERSION = Version(NO_SEGMENT_ID, _NO_VERSION)
"""An unconditional update (Java's ``Version.NO_VERSION``)."""
NOT_EXISTS = Version(NO_SEGMENT_ID, _NOT_EXISTS)
"""The condition "the key does not exist" (Java's ``Version.NOT_EXISTS``)."""


@dataclass(frozen=True, slots=True)
class TableEntry:
    """A key, its current version and its value."""

    key: TableKey
    version: Version
    value: bytes


@dataclass(frozen=True, slots=True)
class Put:
    """Set the key's value; with ``version``, only if the key has that version (``NOT_EXISTS``: is absent)."""

    key: TableKey
    value: bytes
    version: Version = NO_VERSION


@dataclass(frozen=True, slots=True)
class Insert:
    """Set the key's value only if the key does not exist (a :class:`Put` conditioned on ``NOT_EXISTS``)."""

    key: TableKey
    value: bytes

    @property
    def version(self) -> Version:
        return NOT_EXISTS


@dataclass(frozen=True, slots=True)
class Remove:
    """Remove the key; with ``version``, only if the key has that version. Removing a missing key
    unconditionally is no error."""

    key: TableKey
    version: Version = NO_VERSION


TableModification = Put | Insert | Remove
