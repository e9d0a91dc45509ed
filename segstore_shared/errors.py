"""Root of segstore's error tree.

Every error the project raises on purpose derives from :class:`SegstoreError`.
The ``retriable`` class flag tells a retry policy whether repeating the same
call may succeed (a lost connection, a fenced-but-recovering container) or
never will (a malformed frame, a missing stream). Subtrees add context such as
the segment name or the container id; wire error replies map to these classes
through one registry in ``segment_store.client``.
"""

from __future__ import annotations


class SegstoreError(Exception):
    """Base class of every error segstore raises deliberately."""

    retriable: bool = False


class RetriableError(SegstoreError):
    """An error after which the same call may succeed if repeated."""

    retriable = True
