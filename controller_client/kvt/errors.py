"""Errors of key-value tables, as Pravega's client names them.

* :class:`KeyValueTableNotFoundError` (a :class:`~controller_client.errors.ControllerError`): the controller knows
  no such table (never created, or deleted).
* :class:`ConditionalTableUpdateError` and its two kinds, raised by a conditional update that did not apply
  (nothing of its batch was written): :class:`BadKeyVersionError` - a key exists with another version than the
  one given (also: ``put_if_absent`` on a key that exists, or a version from another table segment, as Java's
  ``BadKeyVersionException``), and :class:`NoSuchKeyError` - a key conditioned on a version does not exist
  (Java's ``NoSuchKeyException``). Neither is retriable: the caller re-reads and decides again.
"""

from __future__ import annotations

from controller_client.errors import ControllerError
from segstore_shared.errors import SegstoreError


class KeyValueTableNotFoundError(ControllerError):
    def __init__(self, scope: str, kvt: str) -> None:
        super().__init__(f"key-value table {scope}/{kvt} does not exist")
        self.scope = scope
        self.kvt = kvt


class ConditionalTableUpdateError(SegstoreError):
    """A conditional update of a key-value table did not apply; nothing of its batch was written."""

    def __init__(self, table: str, message: str) -> None:
        super().__init__(f"key-value table {table}: {message}")
        self.table = table


class BadKeyVersionError(ConditionalTableUpdateError):
    """A key's version is not the one the update was conditioned on (it exists when it should not, or has
    changed since it was read)."""


class NoSuchKeyError(ConditionalTableUpdateError):
    """A key the update was conditioned on (by a version other than ``NOT_EXISTS``) does not exist."""
