"""A streaming query as a subscriber of its stream (option ``subscriber``; consumption-based retention, PDP-47).

The query subscribes as the reader group ``<scope>/<subscriber>`` with retention ``MANUAL``: the driver creates the
group on the stream if it is missing (publishing the stream's head as its position at once, so nothing is dropped
before the first micro-batch), and every micro-batch's ``commit(end)`` publishes ``end`` (what the query has read
and Spark has committed) as the group's subscriber cut (``updateSubscriberStreamCut``). The stream's retention then
never truncates past the slowest subscriber (within the policy's maximum, see ``controller.retention``), so a
running query never loses data to retention. Stopping the query keeps the group, and so its hold on the data: a
restarted query continues from its checkpoint; delete the group to release it
(``ControllerClient.delete_reader_group``).
"""

from __future__ import annotations

from controller_client.errors import ReaderGroupNotFoundError
from controller_client.model import (
    InvalidModelError,
    ReaderGroupConfig,
    ReaderGroupRetention,
    StreamCut,
    validate_stream_name,
)
from pravega_spark.connection import StreamConnection
from pravega_spark.errors import SegstoreOptionError


class Subscription:
    """The query's reader group on the driver (see the module docstring)."""

    def __init__(self, connection: StreamConnection, scope: str, stream: str, group: str) -> None:
        try:
            validate_stream_name(group, internal=False)  # a reader group is named like a stream
        except InvalidModelError as error:
            raise SegstoreOptionError("subscriber", f"not a reader group name: {error}") from None
        self.name = f"{scope}/{group}"
        self._scope, self._stream, self._group = scope, stream, group
        self.config = connection.run(self._join(connection))

    async def _join(self, connection: StreamConnection) -> ReaderGroupConfig:
        controller = connection.controller
        try:
            config = await controller.get_reader_group_config(self._scope, self._group)
        except ReaderGroupNotFoundError:
            wanted = ReaderGroupConfig(
                self._scope,
                self._group,
                (StreamCut(self._scope, self._stream, {}),),
                retention_type=ReaderGroupRetention.MANUAL,
            )
            config = await controller.create_reader_group(wanted)
            head = await connection.manager.head_cut(self._scope, self._stream)
            await controller.update_subscriber_stream_cut(self.name, config.reader_group_id, config.generation, head)
        streams = {(c.scope, c.stream) for c in config.starting_stream_cuts}
        if config.retention_type == ReaderGroupRetention.NONE or (self._scope, self._stream) not in streams:
            raise SegstoreOptionError(
                "subscriber",
                f"reader group {self.name} exists and is not a subscriber of {self._scope}/{self._stream} "
                "(its retention type is NONE or it reads other streams): name another group",
            )
        return config

    def publish(self, connection: StreamConnection, cut: StreamCut) -> None:
        """Publish ``cut`` as the group's position on the stream."""
        config = self.config
        connection.run(
            connection.controller.update_subscriber_stream_cut(
                self.name, config.reader_group_id, config.generation, cut
            )
        )
