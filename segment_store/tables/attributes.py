"""Segment attributes a table segment keeps (ids as Pravega's ``TableAttributes`` and ``Attributes``)."""

from __future__ import annotations

from segstore_shared.contracts import core_attribute

TABLE_ATTRIBUTES_START = 1024 * 1024  # Pravega Attributes.TABLE_ATTRIBUTES_START_OFFSET

COMPACTION_OFFSET = core_attribute(TABLE_ATTRIBUTES_START + 4)
"""Where the last compaction stopped: everything live lies at or after it (Pravega ``COMPACTION_OFFSET``)."""

KEY_LENGTH = core_attribute(12)
"""Key length of a fixed-key table (Pravega ``Attributes.ATTRIBUTE_ID_LENGTH``)."""
