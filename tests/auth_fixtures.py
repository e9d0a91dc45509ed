"""Password files for the authentication tests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from segstore_shared.auth.passwords import PasswordFile


def write_password_file(path: Path, users: Mapping[str, tuple[str, str]]) -> Path:
    """Write ``users`` (name -> (password, ACL)) to ``path`` in Pravega's format; returns ``path``."""
    passwords = PasswordFile.parse("")
    for user, (password, acl) in users.items():
        passwords = passwords.with_user(user, password, acl)
    path.write_text(passwords.dump())
    return path
