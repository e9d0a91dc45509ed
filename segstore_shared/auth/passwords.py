"""Password hashes, the password file and ``Basic`` credentials, in Pravega's formats.

A file written here is read by Pravega's ``PasswordAuthHandler`` and a file made by Pravega's admin tool
(``PasswordFileCreatorCommand``) is read here: ``user:hash:acl`` lines, where ``hash`` is Pravega's
``StrongPasswordProcessor`` field (PBKDF2-HMAC-SHA256). No error message, warning or ``repr`` here contains a
password or a hash.

Iterations: every hash field carries its own count and is verified with it (Pravega's ``checkPassword`` does the
same), so one file may mix counts. Pravega's tool writes :data:`PRAVEGA_ITERATIONS` (5,000); new entries here get
:data:`DEFAULT_ITERATIONS` (600,000, OWASP's figure for PBKDF2-HMAC-SHA256 in 2023) unless told otherwise, and
Pravega's controllers verify them too, more slowly.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import os
import re
import secrets
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from segstore_shared.auth.acl import Acl
from segstore_shared.errors import SegstoreError

__all__ = [
    "DEFAULT_ITERATIONS",
    "PRAVEGA_ITERATIONS",
    "CredentialsError",
    "PasswordFile",
    "PasswordFileError",
    "UnknownAuthMethodError",
    "UserEntry",
    "basic_header",
    "hash_password",
    "iterations_of",
    "parse_basic",
    "verify_password",
]

PRAVEGA_ITERATIONS = 5000  # what Pravega's PasswordFileCreatorCommand writes
DEFAULT_ITERATIONS = 600_000  # new entries: OWASP's Password Storage Cheat Sheet, PBKDF2-HMAC-SHA256
SALT_BYTES = 32
KEY_BYTES = 64  # Pravega's keyLength 64*8 bits; a stored hash of another length never verifies
MAX_ITERATIONS = 10_000_000  # more is treated as a malformed field: one login must not take minutes
BASIC = "Basic"
_KNOWN_METHODS = frozenset({"Bearer", "Digest", "Negotiate", "basic", "bearer"})

# one "user:hash" or "user:hash:acl" line; Java's BufferedReader.readLine ends a line at \n, \r or \r\n
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Java's \s, which splits the method from the credentials in the authorization header
_JAVA_SPACE = re.compile(r"[ \t\n\x0b\f\r]+")
_DIGITS = re.compile(r"[0-9]{1,10}")


class PasswordFileError(SegstoreError):
    """The password file cannot be read or has a line that is not ``user:hash[:acl]`` (path and line named)."""


class CredentialsError(SegstoreError):
    """An ``authorization`` value that is not ``Basic base64(user:password)`` (the secret is never quoted)."""


class UnknownAuthMethodError(CredentialsError):
    """The ``authorization`` value names a method other than ``Basic`` (Pravega: no handler, not authenticated)."""


def _password_bytes(password: str) -> bytes:
    # Java's PBEKeySpec takes a char[] and SunJCE encodes it as UTF-8: a lone surrogate becomes '?'
    return password.encode("utf-8", "replace")


def hash_password(password: str, *, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None) -> str:
    """Pravega's stored password field: ``hex(ascii(f"{iterations}:{hex(salt)}:{hex(key)}"))``, lowercase.

    The key is PBKDF2-HMAC-SHA256 of the UTF-8 password, 64 bytes; the salt is 32 random bytes unless given.
    """
    if not 1 <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be between 1 and {MAX_ITERATIONS}, not {iterations}")
    if salt is None:
        salt = secrets.token_bytes(SALT_BYTES)
    key = hashlib.pbkdf2_hmac("sha256", _password_bytes(password), salt, iterations, KEY_BYTES)
    return f"{iterations}:{salt.hex()}:{key.hex()}".encode("ascii").hex()


def _parse_stored(stored: str) -> tuple[int, bytes, bytes] | None:
    """(iterations, salt, key) of a stored field, or None if it is not one."""
    try:
        inner = bytes.fromhex(stored).decode("ascii")
        iterations_text, salt_hex, key_hex = inner.split(":")
        salt, key = bytes.fromhex(salt_hex), bytes.fromhex(key_hex)
    except ValueError:  # not hex, not ASCII (UnicodeDecodeError is a ValueError), not three parts
        return None
    if not _DIGITS.fullmatch(iterations_text):
        return None
    iterations = int(iterations_text)
    if not 1 <= iterations <= MAX_ITERATIONS or len(key) != KEY_BYTES:
        return None
    return iterations, salt, key


def iterations_of(stored: str) -> int | None:
    """The iteration count of a stored field, or None if it is not one."""
    parsed = _parse_stored(stored)
    return None if parsed is None else parsed[0]


def verify_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches the stored field (constant-time compare; False if the field is malformed)."""
    parsed = _parse_stored(stored)
    if parsed is None:
        return False
    iterations, salt, key = parsed
    candidate = hashlib.pbkdf2_hmac("sha256", _password_bytes(password), salt, iterations, KEY_BYTES)
    return hmac.compare_digest(candidate, key)


@functools.cache
def _dummy_hash(iterations: int) -> str:
    """Compared against when the user does not exist, so an unknown user costs as much as a wrong password."""
    return hash_password("", iterations=iterations, salt=bytes(SALT_BYTES))


@dataclass(frozen=True, slots=True)
class UserEntry:
    """One user of a password file: name, stored hash (never in ``repr``), ACL as written and as parsed."""

    user: str
    password_hash: str = field(repr=False)
    acl_text: str
    acl: Acl
    line: int | None = None  # where it was read (1-based); None if added in memory

    def line_text(self) -> str:
        """The file line, as Pravega reads it (``user:hash:acl``)."""
        return f"{self.user}:{self.password_hash}:{self.acl_text}"


def _check_user_name(user: str) -> None:
    if not user:
        raise ValueError("the user name must not be empty")
    if ":" in user or _LINE_BREAK.search(user):
        raise ValueError("the user name must not contain ':' or a line break")
    if user.startswith("#"):
        raise ValueError("the user name must not start with '#' (Pravega reads the line as a comment)")


@dataclass(frozen=True)
class PasswordFile:
    """The users of a password file, as Pravega's ``PasswordAuthHandler`` reads it.

    Format: one user per line, ``user:hash:acl``; the line is split on ``:`` into at most 3 parts, so the ACL
    (``pattern,PERMISSION;...``, see :class:`~segstore_shared.auth.acl.Acl`) may contain ``:``; a line
    ``user:hash`` has an empty ACL (the user authenticates and may do nothing). Lines starting with ``#`` are
    comments (kept by :meth:`dump`). **Reading stops at the first empty line**, as Pravega does: what follows is
    ignored (a warning says so). A final newline is fine. A user listed twice: the last line wins.

    ``warnings`` name line numbers, never hashes: malformed or ineffective ACL entries, hash fields that can
    never verify, duplicates, ignored lines. A line with fewer than 2 fields raises :class:`PasswordFileError`.
    """

    lines: tuple[UserEntry | str, ...] = ()  # users and comment lines (``#...``), in file order
    warnings: tuple[str, ...] = field(default=(), compare=False)
    source: str = field(default="<memory>", compare=False)
    # the empty line where reading stopped, when non-empty lines follow it (they are not in ``lines``)
    stopped_at_line: int | None = field(default=None, compare=False)

    @functools.cached_property
    def users(self) -> Mapping[str, UserEntry]:
        """The users by name (the last line of a name wins)."""
        return {line.user: line for line in self.lines if isinstance(line, UserEntry)}

    @functools.cached_property
    def usual_iterations(self) -> int:
        """The commonest iteration count of the users' hashes (:data:`DEFAULT_ITERATIONS` if none): what a login
        as an unknown user costs, so that it takes as long as a wrong password for most users."""
        found = (iterations_of(entry.password_hash) for entry in self.users.values())
        counts = Counter(n for n in found if n is not None)
        return max(counts, key=lambda n: (counts[n], n)) if counts else DEFAULT_ITERATIONS

    @classmethod
    def parse(cls, text: str, *, source: str = "<text>") -> PasswordFile:
        """The password file in ``text``; ``source`` names it in errors and warnings."""
        physical = _LINE_BREAK.split(text)
        if physical and not physical[-1]:
            physical.pop()  # the end of the last line, not an empty line
        lines: list[UserEntry | str] = []
        warnings: list[str] = []
        seen: dict[str, int] = {}
        stopped_at: int | None = None
        for number, line in enumerate(physical, start=1):
            if not line:
                if any(physical[number:]):
                    stopped_at = number
                    warnings.append(
                        f"{source} line {number} is empty: Pravega stops reading there, lines {number + 1} to "
                        f"{len(physical)} are ignored"
                    )
                break
            if line.startswith("#"):
                lines.append(line)
                continue
            entry = _parse_user_line(line, number, source, warnings)
            if entry.user in seen:
                warnings.append(f"{source} line {number}: user {entry.user!r} again (line {seen[entry.user]}); "
                                "this line wins")  # fmt: skip
            seen[entry.user] = number
            lines.append(entry)
        return cls(tuple(lines), tuple(warnings), source, stopped_at)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PasswordFile:
        """Read and parse the file at ``path`` (UTF-8)."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise PasswordFileError(f"cannot read password file {os.fspath(path)}: {exc.strerror or exc}") from exc
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise PasswordFileError(f"{os.fspath(path)} line {line}: not UTF-8 text") from None
        return cls.parse(text, source=os.fspath(path))

    def authenticate(self, user: str, password: str) -> Acl | None:
        """The ACL of ``user`` if ``password`` is theirs, else None (as slow for an unknown user)."""
        entry = self.users.get(user)
        if entry is None:
            verify_password(password, _dummy_hash(self.usual_iterations))
            return None
        return entry.acl if verify_password(password, entry.password_hash) else None

    def dump(self) -> str:
        """The file's text: comments and users in order, one per line, each ending with a newline."""
        return "".join((line if isinstance(line, str) else line.line_text()) + "\n" for line in self.lines)

    def with_user(
        self, user: str, password: str, acl_text: str, *, iterations: int = DEFAULT_ITERATIONS
    ) -> PasswordFile:
        """A copy with ``user`` added, or replaced (in its place; its other lines dropped), with a new hash of
        ``iterations`` PBKDF2 rounds (ValueError outside 1..:data:`MAX_ITERATIONS`)."""
        _check_user_name(user)
        if _LINE_BREAK.search(acl_text):
            raise ValueError("the ACL must not contain a line break")
        acl, acl_warnings = Acl.parse_with_warnings(acl_text)
        entry = UserEntry(user, hash_password(password, iterations=iterations), acl_text, acl)
        lines: list[UserEntry | str] = []
        placed = False
        for line in self.lines:
            if isinstance(line, UserEntry) and line.user == user:
                if not placed:
                    lines.append(entry)
                    placed = True
                continue
            lines.append(line)
        if not placed:
            lines.append(entry)
        warnings = tuple(f"user {user!r}: {warning}" for warning in acl_warnings)
        return PasswordFile(tuple(lines), warnings, self.source, None)


def _parse_user_line(line: str, number: int, source: str, warnings: list[str]) -> UserEntry:
    fields = line.split(":", 2)
    if len(fields) < 2:
        raise PasswordFileError(f"{source} line {number}: expected user:hash:acl, found no ':'")
    user, password_hash = fields[0], fields[1]
    acl_text = fields[2] if len(fields) == 3 else ""
    where = f"{source} line {number} (user {user!r})"
    if not user:
        warnings.append(f"{where}: the user name is empty")
    if _parse_stored(password_hash) is None:
        warnings.append(f"{where}: the password field is not a Pravega password hash; this user can never log in")
    if len(fields) == 2:
        warnings.append(f"{where}: no ACL; this user can log in but is granted nothing")
    acl, acl_warnings = Acl.parse_with_warnings(acl_text)
    warnings.extend(f"{where}: {warning}" for warning in acl_warnings)
    return UserEntry(user, password_hash, acl_text, acl, number)


def parse_basic(header_value: str) -> tuple[str, str]:
    """(user, password) from an ``authorization`` value ``Basic base64(user:password)``, as Pravega reads it.

    The method is separated by whitespace and must be exactly ``Basic`` (else :class:`UnknownAuthMethodError`);
    the rest is standard base64 (padding optional) of UTF-8 ``user:password``, split at the first ``:`` so the
    password may contain ``:``. Anything else raises :class:`CredentialsError`; no message quotes the secret.
    """
    parts = _JAVA_SPACE.split(header_value, maxsplit=1)
    method = parts[0]
    if method != BASIC:
        # the first word is only named when it is a method we know: a client that sent its secret alone
        # (no method) must not find it in a log
        named = f"method {method}" if method in _KNOWN_METHODS else "no supported method"
        raise UnknownAuthMethodError(f"the authorization value has {named}; only {BASIC} is accepted")
    if len(parts) < 2 or not parts[1]:
        raise CredentialsError("the Basic authorization value has no credentials after 'Basic '")
    encoded = parts[1]
    if len(encoded) % 4 == 1:
        raise CredentialsError("the Basic credentials are not valid base64 (wrong length)")
    try:
        decoded = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except binascii.Error:
        raise CredentialsError("the Basic credentials are not valid base64") from None
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        raise CredentialsError("the Basic credentials are not UTF-8 text") from None
    user, colon, password = text.partition(":")
    if not colon:
        raise CredentialsError("the Basic credentials have no ':' between user and password")
    return user, password


def basic_header(user: str, password: str) -> str:
    """The ``authorization`` value ``Basic base64(user:password)`` (standard base64 with padding)."""
    if ":" in user:
        raise ValueError("the user name must not contain ':' (the server splits at the first one)")
    return f"{BASIC} {base64.b64encode(f'{user}:{password}'.encode()).decode('ascii')}"
