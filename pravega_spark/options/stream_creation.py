"""Creating the scope and the stream a query names when they are missing, as the Pravega Spark connector does.

Options (README, Spark section): ``allowCreateScope``/``allowCreateStream`` (the connector's ``allow_create_scope``,
``allow_create_stream``) say whether a missing scope or stream is created: by default writes create them and reads
do not (a read of a missing stream fails naming it); the ``default*`` options are the configuration of a stream
created here, ignored when it exists: ``defaultNumSegments`` (the minimum with a scaling policy),
``defaultScaleFactor`` with ``defaultSegmentTargetRateBytesPerSec`` or ``...EventsPerSec`` (scaling by data rate,
in KiB/s as Pravega's ``ScalingPolicy.byDataRate`` takes it, or by event rate), ``defaultRetentionDurationMs`` or
``defaultRetentionSizeBytes`` (retention by time or by size). Where the connector silently ignores a combination
(a scale factor without a rate, two rates, two retentions), the option is refused here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller_client.controller.api import ControllerClient
from controller_client.errors import (
    ControllerAuthenticationError,
    ControllerPermissionError,
    ControllerUnavailableError,
    ScopeNotFoundError,
)
from controller_client.model import RetentionPolicy, ScalingPolicy, StreamConfiguration
from pravega_spark.errors import SegstoreOptionError
from pravega_spark.options.common import Options, StreamTarget

_SEGMENTS = ("defaultNumSegments", ("default_num_segments",))
_FACTOR = ("defaultScaleFactor", ("default_scale_factor",))
_BYTES_RATE = ("defaultSegmentTargetRateBytesPerSec", ("default_segment_target_rate_bytes_per_sec",))
_EVENTS_RATE = ("defaultSegmentTargetRateEventsPerSec", ("default_segment_target_rate_events_per_sec",))
_RETENTION_MS = ("defaultRetentionDurationMs", ("default_retention_duration_milliseconds",))
_RETENTION_BYTES = ("defaultRetentionSizeBytes", ("default_retention_size_bytes",))
_ALLOW_SCOPE = ("allowCreateScope", ("allow_create_scope",))
_ALLOW_STREAM = ("allowCreateStream", ("allow_create_stream",))


@dataclass(frozen=True, slots=True)
class StreamCreation:
    """Whether a missing scope and stream are created, and with which configuration."""

    allow_create_scope: bool = True
    allow_create_stream: bool = True
    config: StreamConfiguration = field(default_factory=lambda: StreamConfiguration(ScalingPolicy.fixed(1)))

    @property
    def num_segments(self) -> int:
        return self.config.scaling.min_num_segments

    @classmethod
    def parse(cls, view: Options, *, create_by_default: bool) -> StreamCreation:
        """Raises SegstoreOptionError naming the option (as the user spelled it: ours or the connector's)."""
        segments = view.integer(_SEGMENTS[0], 1, _SEGMENTS[1])
        factor = view.integer(_FACTOR[0], None, _FACTOR[1], minimum=2)
        bytes_rate = view.integer(_BYTES_RATE[0], None, _BYTES_RATE[1], minimum=1024)
        events_rate = view.integer(_EVENTS_RATE[0], None, _EVENTS_RATE[1], minimum=1)
        retention_ms = view.integer(_RETENTION_MS[0], None, _RETENTION_MS[1], minimum=0)
        retention_bytes = view.integer(_RETENTION_BYTES[0], None, _RETENTION_BYTES[1], minimum=0)
        allow_scope = view.boolean(_ALLOW_SCOPE[0], create_by_default, _ALLOW_SCOPE[1])
        allow_stream = view.boolean(_ALLOW_STREAM[0], create_by_default, _ALLOW_STREAM[1])
        assert segments is not None
        if bytes_rate is not None and events_rate is not None:
            raise SegstoreOptionError(
                view.label(*_EVENTS_RATE), f"give one target rate, not both it and '{view.label(*_BYTES_RATE)}'"
            )
        rate = (_BYTES_RATE, bytes_rate) if bytes_rate is not None else (_EVENTS_RATE, events_rate)
        if factor is not None and rate[1] is None:
            raise SegstoreOptionError(
                view.label(*_FACTOR),
                f"needs a target rate to scale by: '{_BYTES_RATE[0]}' or '{_EVENTS_RATE[0]}' "
                "(the Pravega connector ignores a scale factor without one)",
            )
        if factor is None and rate[1] is not None:
            raise SegstoreOptionError(
                view.label(*rate[0]),
                f"needs '{_FACTOR[0]}', how many segments a segment above the rate splits into "
                "(the Pravega connector ignores a rate without one)",
            )
        scaling = ScalingPolicy.fixed(segments)
        if factor is not None and bytes_rate is not None:
            scaling = ScalingPolicy.by_data_rate(bytes_rate // 1024, factor, segments)
        elif factor is not None and events_rate is not None:
            scaling = ScalingPolicy.by_event_rate(events_rate, factor, segments)
        if retention_ms is not None and retention_bytes is not None:
            raise SegstoreOptionError(
                view.label(*_RETENTION_BYTES),
                f"give one retention, by time or by size, not both it and '{view.label(*_RETENTION_MS)}'",
            )
        retention = None
        if retention_ms is not None:
            retention = RetentionPolicy.by_time_ms(retention_ms)
        elif retention_bytes is not None:
            retention = RetentionPolicy.by_size_bytes(retention_bytes)
        return cls(allow_scope, allow_stream, StreamConfiguration(scaling, retention))


async def ensure_stream(controller: ControllerClient, target: StreamTarget, creation: StreamCreation) -> bool:
    """Create the scope and the stream of ``target`` if missing and allowed; True if the stream was created.

    Raises SegstoreOptionError: ``stream`` (missing and not to be created), ``scope`` (missing and not to be
    created), ``controller``, ``password``/``token`` (refused), ``username``/``token`` (may not)."""
    scope, stream = target.scope, target.stream
    try:
        if await controller.stream_exists(scope, stream):
            return False
        if not creation.allow_create_stream:
            raise SegstoreOptionError(
                "stream", f"stream {scope}/{stream} does not exist, and option 'allowCreateStream' is false"
            )
        if creation.allow_create_scope:
            await controller.create_scope(scope)
        try:
            return await controller.create_stream(scope, stream, creation.config)
        except ScopeNotFoundError:
            raise SegstoreOptionError(
                "scope", f"scope {scope} does not exist, and option 'allowCreateScope' is false"
            ) from None
    except ControllerUnavailableError as error:
        raise SegstoreOptionError(
            "controller", f"cannot reach the controller at {target.controller}: {error}"
        ) from None
    except ControllerAuthenticationError as error:
        option = "token" if target.token is not None else "password"
        raise SegstoreOptionError(option, f"the controller refused it ({error})") from None
    except ControllerPermissionError as error:
        option = "token" if target.token is not None else "username"
        raise SegstoreOptionError(option, f"may not create {scope}/{stream}: {error}") from None
