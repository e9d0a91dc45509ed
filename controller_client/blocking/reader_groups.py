"""Blocking forms of :class:`~controller_client.reader_groups.group.ReaderGroup` and its
:class:`~controller_client.reader_groups.reader.EventStreamReader`, for threads without an event loop; made by
``BlockingStreamManager.create_reader_group`` / ``reader_group`` and run on its loop thread (see
:mod:`controller_client.blocking.streams`). Every method blocks until the coroutine ends and re-raises its error."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from controller_client.model import StreamCut
from controller_client.reader_groups.format import ScopedSegment, ScopedStream
from controller_client.reader_groups.group import Checkpoint, ReaderGroup
from controller_client.reader_groups.reader import EventRead, EventStreamReader, GroupReaderConfig
from controller_client.reader_groups.state import GroupView
from segstore_shared.loop_thread import BlockingFacade, ClosableFacade, LoopThread


class BlockingEventStreamReader(ClosableFacade):
    """Blocking face of a group's reader; ``with`` closes it (handing its segments over exactly)."""

    def __init__(self, runner: LoopThread, reader: EventStreamReader) -> None:
        super().__init__(runner)
        self.reader = reader

    @property
    def name(self) -> str:
        return self.reader.name

    @property
    def positions(self) -> dict[ScopedSegment, int]:
        return self.reader.positions

    @property
    def group_finished(self) -> bool:
        return self.reader.group_finished

    def next_event(self, timeout_s: float | None = None) -> EventRead | None:
        """The next event or checkpoint marker; None after ``timeout_s`` without one (see
        :meth:`EventStreamReader.next_event`)."""
        return self._run(self.reader.next_event(timeout_s))

    def events(self, timeout_s: float = 1.0) -> Iterator[EventRead]:
        """Events and markers until the group has nothing left to read (for ever on an open stream)."""
        while True:
            event = self.next_event(timeout_s)
            if event is not None:
                yield event
            elif self.reader.group_finished:
                return

    def close(self) -> None:
        self._run(self.reader.close())


class BlockingReaderGroup(BlockingFacade):
    """Blocking face of a :class:`ReaderGroup`."""

    def __init__(self, runner: LoopThread, group: ReaderGroup) -> None:
        super().__init__(runner)
        self.group = group

    @property
    def streams(self) -> list[ScopedStream]:
        return self.group.streams

    def create_reader(self, reader: str, config: GroupReaderConfig | None = None) -> BlockingEventStreamReader:
        return BlockingEventStreamReader(self._runner, self._run(self.group.create_reader(reader, config)))

    def reader_offline(self, reader: str, positions: Mapping[ScopedSegment, int] | None = None) -> bool:
        return self._run(self.group.reader_offline(reader, positions))

    def online_readers(self) -> list[str]:
        return self._run(self.group.online_readers())

    def state(self) -> GroupView:
        return self._run(self.group.state())

    def stream_cuts(self) -> dict[ScopedStream, StreamCut]:
        return self._run(self.group.stream_cuts())

    def initiate_checkpoint(self, name: str, timeout_s: float | None = 60.0) -> Checkpoint:
        return self._run(self.group.initiate_checkpoint(name, timeout_s))

    def checkpoints(self) -> list[Checkpoint]:
        return self._run(self.group.checkpoints())

    def reset(self, to: Checkpoint | Sequence[StreamCut]) -> None:
        self._run(self.group.reset(to))

    def update_retention_stream_cut(self, cut: StreamCut) -> None:
        self._run(self.group.update_retention_stream_cut(cut))

    def delete(self) -> None:
        self._run(self.group.delete())
