"""The command base class and the type-code registry every command class enrolls in."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import ClassVar, Self, TypeVar

from segment_store.protocol.errors import ProtocolError
from segment_store.protocol.layout import WireRecord, compile_layout


class WireCommand(WireRecord):
    """Base of every wire command: a frozen, slotted dataclass whose fields are in wire order.

    ``TYPE_CODE`` is the int32 written in the frame header (Java ``WireCommandType``). Commands are
    plain values: equal when their fields are equal, hashable, safe to share between tasks.
    """

    __slots__ = ()
    TYPE_CODE: ClassVar[int]

    @classmethod
    def from_body(cls, body: memoryview) -> Self:
        """Decode a whole frame body. Raises ProtocolError if it is shorter or longer than the fields."""
        command, pos = cls.read_fields(body, 0)
        if pos != len(body):
            raise ProtocolError(f"{len(body) - pos} unexpected byte(s) after the last field")
        return command


_REGISTRY: dict[int, type[WireCommand]] = {}
REGISTRY: Mapping[int, type[WireCommand]] = MappingProxyType(_REGISTRY)
"""Read-only view: type code -> command class, for every registered command."""

BodyDecoder = Callable[[memoryview], WireCommand]
_BODY_DECODERS: dict[int, BodyDecoder] = {}
BODY_DECODERS: Mapping[int, BodyDecoder] = MappingProxyType(_BODY_DECODERS)
"""Read-only view: type code -> function decoding a whole frame body (the compiled fast path)."""

C = TypeVar("C", bound=type[WireCommand])


def register(cls: C) -> C:
    """Class decorator: compile the command's layout and enroll it under its ``TYPE_CODE``.

    Raises ``ValueError`` at import time if the code is outside Java's one-byte range or already taken.
    """
    code = cls.TYPE_CODE
    if not -127 <= code <= 127:
        raise ValueError(f"{cls.__name__}: type code {code} does not fit in a byte")
    existing = _REGISTRY.get(code)
    if existing is not None and existing is not cls:
        raise ValueError(f"type code {code} used by both {existing.__name__} and {cls.__name__}")
    compile_layout(cls)
    _REGISTRY[code] = cls
    _BODY_DECODERS[code] = cls.from_body if cls._PLAN is None else cls._PLAN.read_whole
    return cls


def command_class(type_code: int) -> type[WireCommand]:
    """The command class for ``type_code``. Raises ProtocolError naming the code if none is registered."""
    cls = _REGISTRY.get(type_code)
    if cls is None:
        raise ProtocolError(f"unknown wire command type code {type_code}")
    return cls
