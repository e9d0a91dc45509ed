"""Root of segstore's error tree.

Every error the project raises on purpose derives from :class:`SegstoreError`.
The ``retriable`` class flag tells a retry policy whether repeating the same
call may succeed (a lost connection, a fenced-but-recovering container) or
never will (a malformed frame, a missing stream). Subtrees add context such as
the segment name or the container id; wire error replies map to these classes
through one registry in ``segment_store.client``.
"""

from __future__ import annotations

from collections.abc import Mapping


class SegstoreError(Exception):
    """Base class of every error segstore raises deliberately."""

    retriable: bool = False


class RetriableError(SegstoreError):
    """An error after which the same call may succeed if repeated."""

    retriable = True


def naming_flags(error: ValueError, flags: Mapping[str, str]) -> ValueError:
    """``error`` (a settings error, ``"<setting>: what is wrong"``) with its setting named as the command-line flag
    that sets it: ``flags`` maps settings to flags (``{"s3_bucket": "--s3-bucket"}``); other messages stay."""
    setting, colon, rest = str(error).partition(":")
    flag = flags.get(setting)
    return ValueError(f"{flag}:{rest}") if colon and flag else error
