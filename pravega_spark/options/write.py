"""Options of the ``segstore`` sink (batch and streaming writes), parsed once; errors name the option.

What each option means is in the README's Spark section (one table for reads and writes, checked against
:mod:`pravega_spark.options.names`). An option writes do not take fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pravega_spark.errors import SegstoreOptionError
from pravega_spark.options.common import DEFAULT_CONTROLLER_TIMEOUT_MS, Options, StreamTarget
from pravega_spark.options.stream_creation import StreamCreation

DEFAULT_TRANSACTION_TIMEOUT_MS = 120_000
MAX_TRANSACTION_TIMEOUT_MS = 600_000
"""The controller's default ``txn_max_lease_ms``; a longer lease is refused by the controller."""
MIN_TRANSACTION_TIMEOUT_MS = 1_000
DEFAULT_STATUS_POLL_INTERVAL_MS = 250
"""With read-after-write consistency the commit polls the transactions' states, first after 5 ms, then each
time twice as long up to this."""


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Everything the sink needs from Spark's option map."""

    target: StreamTarget
    exactly_once: bool = True
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    creation: StreamCreation = field(default_factory=StreamCreation)
    """Options allowCreateScope, allowCreateStream and default*: whether and how a missing stream is created."""
    read_after_write_consistency: bool = True
    transaction_status_poll_interval_ms: int = DEFAULT_STATUS_POLL_INTERVAL_MS
    checkpoint_location: str | None = None
    """Spark's ``checkpointLocation`` option when given; the commit log key when tasks do not name the
    query (they always do under Structured Streaming)."""
    controller_timeout_ms: int = DEFAULT_CONTROLLER_TIMEOUT_MS
    """Option ``controllerTimeoutMs``: the budget for "unreachable" of the driver's and the tasks' controller calls
    (the controller client's ``retry_timeout_s``)."""

    @classmethod
    def parse(cls, options: Mapping[str, str], per_row: bool = False) -> WriteOptions:
        """Raises SegstoreOptionError naming the first missing or invalid option. ``per_row``: the DataFrame has a
        ``stream`` column (:mod:`pravega_spark.write.targets`): option ``stream`` may then be left out, and the rows
        name their streams (``target.stream`` is then ``""``); given, it wins over the column, as the ``topic``
        option of Spark's Kafka sink does (a DataFrame read from one stream, written with ``stream`` set, goes
        there, not back where it came from)."""
        view = Options.of(options, "write")
        target = StreamTarget.parse(view, require_stream=not per_row)
        if per_row and not target.stream and target.logs_in:
            raise SegstoreOptionError(
                "username",
                "rows that name their stream (a 'stream' column) cannot be written with username/password: "
                "executors get a token for one stream only, and the streams of the rows are not known in advance; "
                "write each stream with its own query, or leave the 'stream' column out",
            )
        exactly_once = view.boolean("exactlyOnce", True, aliases=["exactly_once"])
        timeout = view.integer(
            "transactionTimeoutMs",
            DEFAULT_TRANSACTION_TIMEOUT_MS,
            aliases=["transaction_timeout_ms"],
            minimum=MIN_TRANSACTION_TIMEOUT_MS,
        )
        assert timeout is not None
        if timeout > MAX_TRANSACTION_TIMEOUT_MS:
            raise SegstoreOptionError(
                "transactionTimeoutMs", f"must be at most {MAX_TRANSACTION_TIMEOUT_MS} (the controller's limit)"
            )
        creation = StreamCreation.parse(view, create_by_default=True)
        consistency = view.boolean("readAfterWriteConsistency", True, aliases=["read_after_write_consistency"])
        poll = view.integer(
            "transactionStatusPollIntervalMs",
            DEFAULT_STATUS_POLL_INTERVAL_MS,
            aliases=["transaction_status_poll_interval_ms"],
        )
        assert poll is not None
        controller_timeout = view.integer("controllerTimeoutMs", DEFAULT_CONTROLLER_TIMEOUT_MS, minimum=1)
        assert controller_timeout is not None
        checkpoint = view.raw("checkpointLocation")
        view.raw("queryName")  # Spark's own (the query's name): taken, and left to Spark
        return cls(
            target=target,
            exactly_once=exactly_once,
            transaction_timeout_ms=timeout,
            creation=creation,
            read_after_write_consistency=consistency,
            transaction_status_poll_interval_ms=poll,
            checkpoint_location=checkpoint.strip() if checkpoint and checkpoint.strip() else None,
            controller_timeout_ms=controller_timeout,
        )

    @property
    def ping_interval_s(self) -> float:
        """How often a task renews its transaction's lease while it writes."""
        return self.transaction_timeout_ms / 3000.0
