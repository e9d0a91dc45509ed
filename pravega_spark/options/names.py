"""Every option name ``format("segstore")`` takes, for reads and for writes: the one list the parsers are held to.

:class:`~pravega_spark.options.common.Options` looks options up only under names listed here (a lookup of another
name is a bug: AssertionError), and before parsing it refuses every option given that is not listed for the query's
kind, with an error naming it and the closest known name (:func:`check_known`). The Spark page of the docs
(``docs/spark.md``) documents each option once, in one table; ``tests/pravega_spark/options/test_option_table.py``
checks that table against :data:`OPTIONS` and that the parsers look up exactly these names.

Spark passes some options on its own (:attr:`OptionName.spark`), found by recording what reaches a Python data
source in Spark 4: ``path`` (``load(path)``, ``save(path)``, ``start(path)``), ``paths`` (``load(p1, p2)``, as a JSON
list), and for streaming writes ``checkpointLocation`` and ``queryName``. Session settings
(``spark.datasource.<name>.*``) do not reach a Python data source.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pravega_spark.errors import SegstoreOptionError

Kind = Literal["read", "write"]


@dataclass(frozen=True, slots=True)
class OptionName:
    """One option: its name, other names it answers to (the Pravega Spark connector's first), and who takes it."""

    name: str
    aliases: tuple[str, ...] = ()
    reads: bool = True
    writes: bool = True
    spark: bool = False
    """Passed by Spark itself (it may arrive in lower case)."""

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def taken_by(self, kind: Kind) -> bool:
        return self.reads if kind == "read" else self.writes


OPTIONS: tuple[OptionName, ...] = (
    # where: both
    OptionName("controller"),
    OptionName("scope"),
    OptionName("stream"),
    OptionName("path", spark=True),
    OptionName("paths", spark=True, writes=False),
    OptionName("trustStore", ("trust_store",)),
    OptionName("username"),
    OptionName("password"),
    OptionName("token"),
    OptionName("controllerTimeoutMs"),
    # creating a missing stream: both
    OptionName("allowCreateScope", ("allow_create_scope",)),
    OptionName("allowCreateStream", ("allow_create_stream",)),
    OptionName("defaultNumSegments", ("default_num_segments",)),
    OptionName("defaultScaleFactor", ("default_scale_factor",)),
    OptionName("defaultSegmentTargetRateBytesPerSec", ("default_segment_target_rate_bytes_per_sec",)),
    OptionName("defaultSegmentTargetRateEventsPerSec", ("default_segment_target_rate_events_per_sec",)),
    OptionName("defaultRetentionDurationMs", ("default_retention_duration_milliseconds",)),
    OptionName("defaultRetentionSizeBytes", ("default_retention_size_bytes",)),
    # reads
    OptionName("startingOffsets", ("start_stream_cut",), writes=False),
    OptionName("endingOffsets", ("end_stream_cut",), writes=False),
    OptionName("startingTimestamp", writes=False),
    OptionName("endingTimestamp", writes=False),
    OptionName("startingTimestampStrategy", writes=False),
    OptionName("maxBytesPerTrigger", ("approx_bytes_per_trigger",), writes=False),
    OptionName("maxEventsPerTrigger", writes=False),
    OptionName("minEventsPerTrigger", writes=False),
    OptionName("maxTriggerDelay", writes=False),
    OptionName("maxBytesPerPartition", writes=False),
    OptionName("minPartitions", writes=False),
    OptionName("failOnDataLoss", writes=False),
    OptionName("tier2Location", writes=False),
    OptionName("metadata", writes=False),
    OptionName("subscriber", writes=False),
    OptionName("watermarkColumn", writes=False),
    OptionName("streams", writes=False),
    OptionName("streamPattern", writes=False),
    # writes
    OptionName("exactlyOnce", ("exactly_once",), reads=False),
    OptionName("transactionTimeoutMs", ("transaction_timeout_ms",), reads=False),
    OptionName("readAfterWriteConsistency", ("read_after_write_consistency",), reads=False),
    OptionName("transactionStatusPollIntervalMs", ("transaction_status_poll_interval_ms",), reads=False),
    OptionName("checkpointLocation", spark=True, reads=False),
    OptionName("queryName", spark=True, reads=False),
)

REFUSED: Mapping[str, str] = {
    "encoding": "not supported: the Pravega Spark connector's event encodings (chunked_v1, removed from it in 2020) "
    "are not written or decoded here; events are read and written as they are",
}
"""Options of the Pravega Spark connector that cannot mean anything here -> why (the error says it). The
connector's documentation lists none: its Keycloak set-up (Streaming Data Platform) is environment variables
and a keycloak.json file of the Pravega client, never options, so nothing of it reaches a data source."""

_BY_NAME: dict[str, OptionName] = {n.lower(): o for o in OPTIONS for n in o.names}


def canonical(name: str) -> str:
    """The registered spelling of ``name`` (any case), or ``name`` itself if it is not registered."""
    option = _BY_NAME.get(name.lower())
    if option is None:
        return name
    return next(n for n in option.names if n.lower() == name.lower())


def known_names(kind: Kind) -> list[str]:
    """Every name (with aliases) an option of ``kind`` answers to, in registry order."""
    return [n for o in OPTIONS if o.taken_by(kind) for n in o.names]


def is_registered(name: str, kind: Kind | None) -> bool:
    option = _BY_NAME.get(name.lower())
    return option is not None and (kind is None or option.taken_by(kind))


def closest(name: str, kind: Kind) -> str | None:
    """The known name of ``kind`` closest to ``name`` (case-insensitive), None if none is close."""
    names = known_names(kind)
    found = difflib.get_close_matches(name.lower(), [n.lower() for n in names], n=1, cutoff=0.5)
    return canonical(found[0]) if found else None


def check_known(given: Iterable[str], kind: Kind) -> None:
    """Raise SegstoreOptionError for the first option in ``given`` that ``kind`` does not take: one of the other
    kind, one refused here (why), or an unknown one (with the closest known name). Spark hands a Python data
    source the names in lower case, so an unknown one is named as it came, the others as they are spelled here."""
    for key in given:
        lowered = key.lower()
        option = _BY_NAME.get(lowered)
        if option is not None and option.taken_by(kind):
            continue
        if option is not None:
            other = "writes" if kind == "read" else "reads"
            raise SegstoreOptionError(canonical(key), f"is an option of {other}; {kind}s do not take it")
        reason = next((why for name, why in REFUSED.items() if name.lower() == lowered), None)
        if reason is not None:
            raise SegstoreOptionError(key, reason)
        suggestion = closest(key, kind)
        hint = f"did you mean '{suggestion}'?" if suggestion else f"{kind}s take {', '.join(known_names(kind))}"
        raise SegstoreOptionError(key, f"unknown option of {kind}s; {hint} (see the README's Spark section)")
