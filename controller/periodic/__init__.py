"""The controller's periodic work over the streams of the buckets it owns (:mod:`controller.cluster.buckets`).

* ``background`` - :class:`~controller.periodic.background.BackgroundWork`, the loops: each on its own period, each
  running a stream's work only while this controller owns the stream's bucket (transaction timeouts and resuming
  workflows a controller left midway, retention, auto-scaling, watermarks);
* ``retention`` - one stream's retention round (tail cuts, truncation by policy and subscribers);
* ``watermarking`` - one stream's watermark round (from its writers' marks);
* ``autoscaler`` - one stream's auto-scaling round (segment rates measured, the scale decided).

The decisions themselves are pure functions in :mod:`controller.policies`. This package sits below the domain API
(:mod:`controller.core` composes it) and above the workflows: it may import :mod:`controller.config`,
:mod:`controller.cluster`, :mod:`controller.metadata`, :mod:`controller.policies`, :mod:`controller.segment_ops`
and :mod:`controller.workflows`, never :mod:`controller.core`, :mod:`controller.rpc` or :mod:`controller.service`.
What the loops need of the domain API is the Protocol :class:`PeriodicCore` below (the core satisfies it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol

from controller.config import ControllerConfig

PerStream = Callable[[str, str], Awaitable[object]]
"""One stream's periodic work: ``work(scope, stream)``."""


class TxnTimeouts(Protocol):
    """The transaction workflows, as the sweep sees them (:class:`~controller.workflows.transactions.TxnWorkflows`)."""

    async def abort_expired(self, owns: Callable[[str, str], bool]) -> object:
        """Abort the tracked transactions of the streams ``owns`` accepts whose lease has expired."""
        ...


class PeriodicCore(Protocol):
    """What the periodic loops need of the domain API (:class:`~controller.core.ControllerCore`): the periods, the
    streams, and each stream's work."""

    @property
    def config(self) -> ControllerConfig: ...

    @property
    def txns(self) -> TxnTimeouts: ...

    def all_streams(self) -> AsyncIterator[tuple[str, str]]: ...

    async def guarded(self, kind: str, scope: str, stream: str, work: PerStream) -> bool:
        """Run one stream's ``work``, logging a failure instead of raising; True if it ran to the end."""
        ...

    async def resume(self, scope: str, stream: str) -> None: ...

    async def forget_completed_transactions(self, scope: str, stream: str) -> None: ...

    async def retain(self, scope: str, stream: str) -> None: ...

    async def auto_scale(self, scope: str, stream: str) -> None: ...

    async def watermark(self, scope: str, stream: str) -> None: ...
