"""Key-value table messages of ``Controller.proto`` to and from :mod:`controller_client.kvt.model` values.

Decoding checks what the model checks and names the field (``KeyValueTableConfig.partitionCount: ...``); names
are decoded by the caller, which answers an invalid one with the protocol's status (``INVALID_TABLE_NAME``,
``SCOPE_NOT_FOUND``) rather than an error.
"""

from __future__ import annotations

from controller_client.kvt.model import KeyValueTableConfiguration
from controller_client.model import InvalidModelError
from controller_client.proto import Controller_pb2 as pb

_FIELDS = {
    "partition_count": "partitionCount",
    "primary_key_length": "primaryKeyLength",
    "secondary_key_length": "secondaryKeyLength",
    "rollover_size_bytes": "rolloverSizeBytes",
}


def kvt_config_to_proto(scope: str, kvt: str, config: KeyValueTableConfiguration) -> pb.KeyValueTableConfig:
    return pb.KeyValueTableConfig(
        scope=scope,
        kvtName=kvt,
        partitionCount=config.partition_count,
        primaryKeyLength=config.primary_key_length,
        secondaryKeyLength=config.secondary_key_length,
        rolloverSizeBytes=config.rollover_size_bytes,
    )


def kvt_config_from_proto(
    msg: pb.KeyValueTableConfig, where: str = "KeyValueTableConfig"
) -> KeyValueTableConfiguration:
    """The configuration in ``msg`` (its scope and name are not looked at); InvalidModelError names the field."""
    try:
        return KeyValueTableConfiguration(
            partition_count=msg.partitionCount,
            primary_key_length=msg.primaryKeyLength,
            secondary_key_length=msg.secondaryKeyLength,
            rollover_size_bytes=msg.rolloverSizeBytes,
        )
    except InvalidModelError as e:
        text = str(e)
        field, _, reason = text.partition(": ")
        wire = "/".join(_FIELDS.get(part.strip(), part.strip()) for part in field.split("+"))
        raise InvalidModelError(f"{where}.{wire}: {reason}") from None


def kvt_info_to_proto(scope: str, kvt: str) -> pb.KeyValueTableInfo:
    return pb.KeyValueTableInfo(scope=scope, kvtName=kvt)
