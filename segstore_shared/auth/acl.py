"""Resources, permissions and access-control lists, with Pravega's meaning.

A *resource* is a string such as ``prn::/scope:S/stream:T``; the builders below write them as Pravega's
``AuthorizationResourceImpl`` does. An :class:`Acl` maps a resource to a :class:`Permission`: its entries are
tried in order and the first whose pattern matches decides (see :class:`Acl` for the exact rules).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

__all__ = [
    "Acl",
    "AclEntry",
    "Permission",
    "key_value_table",
    "raw_stream",
    "reader_group",
    "root",
    "scope",
    "stream",
]

_DOMAIN = "prn"
_ROOT = "prn::/"
# Java's String.trim(): every character up to U+0020 (the ASCII controls and the space)
_JAVA_WHITESPACE = "".join(chr(c) for c in range(0x21))


class Permission(enum.IntEnum):
    """Pravega's ``AuthHandler.Permissions``; the order matters: a check passes iff ``granted >= needed``."""

    NONE = 0
    READ = 1
    READ_UPDATE = 2

    @classmethod
    def from_name(cls, name: str) -> Permission | None:
        """The permission spelled exactly ``name`` (case-sensitive, as Java's ``valueOf``), else None."""
        return cls.__members__.get(name)


def root() -> str:
    """The root resource ``prn::/``: creating, deleting and listing scopes."""
    return _ROOT


def scope(scope_name: str) -> str:
    """``prn::/scope:S``: the scope itself (also the resource for creating streams, reader groups, tables in it)."""
    return f"{_ROOT}scope:{scope_name}"


def raw_stream(scope_name: str, stream_name: str) -> str:
    """``prn::/scope:S/stream:T`` with no mapping of internal names: the resource a delegation token names."""
    return f"{scope(scope_name)}/stream:{stream_name}"


def stream(scope_name: str, stream_name: str) -> str:
    """The resource of stream ``T`` in scope ``S``, internal streams mapped as Pravega's ``ofInternalStream``.

    ``_RGx`` is reader group ``x`` (every ``_RG`` in the name is removed, as Java's ``String.replace``), ``_MARKx``
    is the stream ``x`` (every ``_MARK`` removed); any other name is the stream itself.
    """
    if stream_name.startswith("_RG"):
        return reader_group(scope_name, stream_name.replace("_RG", ""))
    if stream_name.startswith("_MARK"):
        return raw_stream(scope_name, stream_name.replace("_MARK", ""))
    return raw_stream(scope_name, stream_name)


def reader_group(scope_name: str, group: str) -> str:
    """``prn::/scope:S/reader-group:R``."""
    return f"{scope(scope_name)}/reader-group:{group}"


def key_value_table(scope_name: str, table: str) -> str:
    """``prn::/scope:S/key-value-table:K``."""
    return f"{scope(scope_name)}/key-value-table:{table}"


def java_split(text: str, separator: str) -> list[str]:
    """Java's ``String.split`` with a literal one-character separator: trailing empty strings are dropped,
    and a text without the separator is returned whole (so ``""`` gives ``[""]``)."""
    if separator not in text:
        return [text]
    parts = text.split(separator)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def java_trim(text: str) -> str:
    """Java's ``String.trim()``."""
    return text.strip(_JAVA_WHITESPACE)


@dataclass(frozen=True, slots=True)
class AclEntry:
    """One ``pattern,PERMISSION`` entry; ``pattern`` as written (``*`` not yet expanded)."""

    pattern: str
    permission: Permission
    _regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        regex = ".*".join(re.escape(part) for part in self.pattern.split("*"))
        object.__setattr__(self, "_regex", re.compile(regex))

    def matches(self, resource: str) -> bool:
        """Whether this entry applies to ``resource`` (never, if the pattern does not start with ``prn``)."""
        return self.pattern.startswith(_DOMAIN) and self._regex.fullmatch(resource) is not None

    def __str__(self) -> str:
        return f"{self.pattern},{self.permission.name}"

    @classmethod
    def parse(cls, text: str) -> AclEntry | None:
        """One entry as Pravega's ``AccessControlEntry.fromString`` reads it; None if it is malformed."""
        parts = java_split(text, ",")
        if not text or len(parts) != 2 or not parts[0] or not parts[1]:
            return None
        permission = Permission.from_name(java_trim(parts[1]))
        return None if permission is None else cls(java_trim(parts[0]), permission)


@dataclass(frozen=True, slots=True)
class Acl:
    """An access-control list: ``entry;entry;...``, each entry ``pattern,PERMISSION``.

    Matching (Pravega's ``AclAuthorizerImpl``): the entries are tried in order; the FIRST entry whose pattern
    matches the whole resource decides, even if it grants ``NONE`` (so an early ``...,NONE`` denies). A pattern
    matches when the resource equals it with every ``*`` standing for any run of characters (``.*``); entries
    whose pattern does not start with ``prn`` never match (the pre-0.9 format ``*,READ_UPDATE`` or ``scope/*``
    grants nothing). No entry matches: ``NONE``.

    There is no hierarchy: a scope's permission does not cover its streams.

    - ``prn::/scope:abc`` matches the scope resource ``prn::/scope:abc`` only;
    - ``prn::/scope:abc/*`` matches everything in the scope (``prn::/scope:abc/stream:s``, its reader groups,
      its key-value tables) but not ``prn::/scope:abc`` itself;
    - ``prn::/*`` matches every scope and everything in it, and the root ``prn::/`` (``*`` may be empty);
    - ``prn::*`` matches everything; ``prn::/`` matches the root only;
    - ``prn::/scope:*/stream:mystream`` and ``prn::/scope:abc/stream:str*`` work as they read.

    One deliberate difference from Java: Pravega uses the pattern as a Java regex, so a ``.`` in it matches any
    character and other metacharacters are live; here everything but ``*`` is literal (``re.escape``), so
    ``prn::/scope:a.b`` does not match ``prn::/scope:axb``. ACLs written for Pravega mean the same here unless
    they relied on regex syntax.

    Parsing (``PasswordAuthHandler.parseAcl``): the text is trimmed and split on ``;``; an entry must split on
    ``,`` into exactly two non-empty parts; the permission (trimmed) is ``NONE``, ``READ`` or ``READ_UPDATE``,
    case-sensitive. Malformed entries are dropped (:meth:`parse_with_warnings` says which); a trailing ``;``
    is harmless.
    """

    entries: tuple[AclEntry, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Acl:
        """The ACL in ``text``; malformed entries are ignored, as Pravega does."""
        return cls.parse_with_warnings(text)[0]

    @classmethod
    def parse_with_warnings(cls, text: str) -> tuple[Acl, list[str]]:
        """The ACL in ``text`` and one warning per entry that grants nothing (malformed, or not ``prn...``)."""
        trimmed = java_trim(text)
        if not trimmed:
            return cls(), []
        entries: list[AclEntry] = []
        warnings: list[str] = []
        for number, raw in enumerate(java_split(trimmed, ";"), start=1):
            entry = AclEntry.parse(raw)
            if entry is None:
                warnings.append(
                    f"ACL entry {number} {raw!r} is not 'pattern,PERMISSION' with PERMISSION one of "
                    f"{', '.join(Permission.__members__)}: ignored"
                )
                continue
            if not entry.pattern.startswith(_DOMAIN):
                warnings.append(
                    f"ACL entry {number} {raw!r} does not start with 'prn' (the pre-0.9 format?): it grants nothing"
                )
            entries.append(entry)
        return cls(tuple(entries)), warnings

    def permission_for(self, resource: str) -> Permission:
        """The permission of the first entry matching ``resource``; ``NONE`` if none does."""
        for entry in self.entries:
            if entry.matches(resource):
                return entry.permission
        return Permission.NONE

    def allows(self, resource: str, needed: Permission) -> bool:
        """Whether this ACL grants at least ``needed`` on ``resource``."""
        return self.permission_for(resource) >= needed

    def __str__(self) -> str:
        return ";".join(str(entry) for entry in self.entries)
