"""Options ``maxEventsPerTrigger``, ``minEventsPerTrigger`` and ``maxTriggerDelay`` of streaming reads (Kafka's
``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` and ``maxTriggerDelay``, counted in events): parsed here, applied by
:mod:`pravega_spark.read.admission`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pravega_spark.errors import SegstoreOptionError
from pravega_spark.options.common import Options

DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
"""Kafka's default ``maxTriggerDelay`` (15m)."""

_UNIT_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"(\d+)\s*([a-z]*)")


def duration_ms(option: str, text: str) -> int:
    """``text`` as Spark's time strings (Kafka's ``maxTriggerDelay``): a whole number with a unit ``us``, ``ms``,
    ``s``, ``m``/``min``, ``h`` or ``d`` (no unit: milliseconds). Raises SegstoreOptionError naming ``option``."""
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None or found.group(2) not in ("", *_UNIT_MS):
        raise SegstoreOptionError(option, f"must be a duration such as '15s', '500ms' or '2m', got {text!r}")
    return int(int(found.group(1)) * _UNIT_MS.get(found.group(2), 1))


@dataclass(frozen=True, slots=True)
class AdmissionOptions:
    """What a micro-batch admits in events (None: no limit). ``min_events_per_trigger``: a micro-batch is offered only
    when that many events are available or ``max_trigger_delay_ms`` passed since the last one."""

    max_events_per_trigger: int | None = None
    min_events_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS

    @classmethod
    def parse(cls, view: Options) -> AdmissionOptions:
        max_events = view.integer("maxEventsPerTrigger", None, minimum=1)
        min_events = view.integer("minEventsPerTrigger", None, minimum=1)
        delay = view.raw("maxTriggerDelay")
        if delay is not None and min_events is None:
            raise SegstoreOptionError("maxTriggerDelay", "means nothing without option 'minEventsPerTrigger'")
        delay_ms = DEFAULT_MAX_TRIGGER_DELAY_MS if delay is None else duration_ms("maxTriggerDelay", delay)
        return cls(max_events, min_events, delay_ms)

    @property
    def given(self) -> str | None:
        """The name of one option given, None if none is."""
        if self.max_events_per_trigger is not None:
            return "maxEventsPerTrigger"
        return None if self.min_events_per_trigger is None else "minEventsPerTrigger"
