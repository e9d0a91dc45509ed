"""The layout compiler: one command's list of field kinds becomes a pair of straight-line functions.

For each layout, :class:`Plan` generates (like ``dataclasses`` does for ``__init__``) a reader that
unpacks runs of fixed-size fields with one precompiled ``struct.Struct`` each, calls the variable
kinds in between, and builds the record directly; and a writer that reads the attributes and appends
the encoded parts. The generated code only refers to objects of the layout (structs, converters,
kinds), never to input data, so it is as safe as hand-written code and much faster than interpreting
the layout per frame.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Self, TypeVar, cast

from segment_store.protocol.errors import ProtocolError
from segment_store.protocol.types import BLOB, Buffer, Fixed, Kind, Opt, short_read

Reader = Callable[[memoryview, int], tuple[Any, int]]
_I32 = struct.Struct(">i")
Writer = Callable[[Any, list[Buffer]], None]


def _fixed_short(names: str, need: int, pos: int, have: int) -> ProtocolError:
    return ProtocolError(f"field(s) {names}: {short_read(need, pos, have)}")


def _field_error(name: str, exc: ProtocolError) -> ProtocolError:
    return ProtocolError(f"field {name}: {exc}")


def _blob_error(name: str, pos: int, have: int, length: int | None) -> ProtocolError:
    if length is None:
        return _field_error(name, short_read(4, pos, have))
    if length < 0:
        return _field_error(name, ProtocolError(f"negative byte-buffer length {length} at offset {pos - 4}"))
    return _field_error(name, short_read(length, pos, have))


def _trailing(extra: int) -> ProtocolError:
    return ProtocolError(f"{extra} unexpected byte(s) after the last field")


class Plan:
    """A compiled layout for a record type.

    ``read(body, pos)`` returns ``(record, position after it)`` and raises :class:`ProtocolError` naming
    the field that did not fit or was invalid. ``write(record, out)`` appends the encoded fields to
    ``out``; it may raise ProtocolError or ``struct.error`` (out-of-range integers), which the codec
    reports per command.
    """

    __slots__ = ("names", "read", "read_whole", "write")

    def __init__(self, names: Sequence[str], layout: Sequence[Kind], factory: Callable[..., Any]) -> None:
        if len(names) != len(layout):
            raise ValueError(f"layout has {len(layout)} kinds for {len(names)} fields {list(names)}")
        self.names = tuple(names)
        env: dict[str, Any] = {
            "ProtocolError": ProtocolError,
            "_fixed_short": _fixed_short,
            "_field_error": _field_error,
            "_blob_error": _blob_error,
            "_trailing": _trailing,
            "_I32": _I32,
            "_factory": factory,
        }
        body: list[str] = []
        write_lines = self._writer_lines(names, layout, env)
        index = 0
        while index < len(layout):
            kind = layout[index]
            if isinstance(kind, Fixed):
                end = index
                while end < len(layout) and isinstance(layout[end], Fixed):
                    end += 1
                self._fixed_run(index, end, layout, env, body)
                index = end
                continue
            name = names[index]
            if isinstance(kind, Opt) and isinstance(kind.inner, Fixed):
                self._optional_fixed(index, kind, kind.inner, env, body)
            elif kind is BLOB:
                body += [
                    "    if pos + 4 > n:",
                    f"        raise _blob_error({name!r}, pos, n, None)",
                    "    length, = _I32.unpack_from(body, pos)",
                    "    pos += 4",
                    "    if length < 0 or pos + length > n:",
                    f"        raise _blob_error({name!r}, pos, n, length)",
                    f"    v{index} = bytes(body[pos : pos + length])",
                    "    pos += length",
                ]
            else:
                env[f"r{index}"] = kind.read
                body += [
                    "    try:",
                    f"        v{index}, pos = r{index}(body, pos)",
                    "    except ProtocolError as exc:",
                    f"        raise _field_error({name!r}, exc) from None",
                ]
            index += 1
        args = ", ".join(f"v{i}" for i in range(len(layout)))
        read_lines = ["def read(body, pos):", "    n = len(body)", *body, f"    return _factory({args}), pos"]
        whole_lines = [
            "def read_whole(body):",
            "    n = len(body)",
            "    pos = 0",
            *body,
            "    if pos != n:",
            "        raise _trailing(n - pos)",
            f"    return _factory({args})",
        ]
        for lines in (read_lines, whole_lines, write_lines):
            exec("\n".join(lines), env)
        self.read: Reader = env["read"]
        self.read_whole: Callable[[memoryview], Any] = env["read_whole"]
        self.write: Writer = env["write"]

    @staticmethod
    def _writer_lines(names: Sequence[str], layout: Sequence[Kind], env: dict[str, Any]) -> list[str]:
        """The writer: each run of fixed-size fields (optional ones included: they are always written) is
        one ``struct.pack``; every other kind writes itself."""
        lines = ["def write(obj, out):", "    append = out.append"]
        index = 0
        while index < len(layout):
            run: list[tuple[int, Fixed]] = []
            while index < len(layout):
                kind = layout[index]
                fixed = kind.inner if isinstance(kind, Opt) else kind
                if not isinstance(fixed, Fixed):
                    break
                run.append((index, fixed))
                index += 1
            if run:
                first = run[0][0]
                env[f"p{first}"] = struct.Struct(">" + "".join(kind.fmt or "" for _, kind in run))
                values = []
                for i, kind in run:
                    if kind.encode is not None:
                        env[f"e{i}"] = kind.encode
                        values.append(f"e{i}(obj.{names[i]})")
                    else:
                        values.append(f"obj.{names[i]}")
                lines.append(f"    append(p{first}.pack({', '.join(values)}))")
                continue
            env[f"w{index}"] = layout[index].write
            lines.append(f"    w{index}(obj.{names[index]}, out)")
            index += 1
        if not layout:
            lines.append("    pass")
        return lines

    def _fixed_run(
        self, start: int, end: int, layout: Sequence[Kind], env: dict[str, Any], read_lines: list[str]
    ) -> None:
        kinds = cast(Sequence[Fixed], layout[start:end])
        packer = struct.Struct(">" + "".join(k.fmt or "" for k in kinds))
        env[f"s{start}"] = packer
        targets = [f"v{i}" for i in range(start, end)]
        names = ", ".join(self.names[start:end])
        read_lines += [
            f"    if pos + {packer.size} > n:",
            f"        raise _fixed_short({names!r}, {packer.size}, pos, n)",
            f"    {', '.join(targets)}{',' if len(targets) == 1 else ''} = s{start}.unpack_from(body, pos)",
            f"    pos += {packer.size}",
        ]
        for i, kind in zip(range(start, end), kinds, strict=True):
            if kind.decode is not None:
                env[f"d{i}"] = kind.decode
                read_lines.append(f"    v{i} = d{i}(v{i})")

    def _optional_fixed(self, i: int, opt: Opt, kind: Fixed, env: dict[str, Any], read_lines: list[str]) -> None:
        env[f"s{i}"] = kind.struct
        env[f"default{i}"] = opt.default
        read_lines += [
            f"    if n - pos >= {opt.min_remaining}:",
            f"        if pos + {kind.size} > n:",
            f"            raise _fixed_short({self.names[i]!r}, {kind.size}, pos, n)",
            f"        v{i}, = s{i}.unpack_from(body, pos)",
            f"        pos += {kind.size}",
        ]
        if kind.decode is not None:
            env[f"d{i}"] = kind.decode
            read_lines.append(f"        v{i} = d{i}(v{i})")
        read_lines += ["    else:", f"        v{i} = default{i}"]


class WireRecord:
    """Base of dataclasses with a wire layout: commands and the records nested in them.

    Subclasses are ``@dataclass(frozen=True, slots=True)`` with fields declared in wire order and a
    ``LAYOUT`` class attribute of one :class:`Kind` per field; :func:`compile_layout` builds ``_PLAN``.
    Records with irregular encodings override :meth:`write_fields` and :meth:`read_fields` instead.
    """

    __slots__ = ()
    LAYOUT: ClassVar[tuple[Kind, ...] | None] = None
    _PLAN: ClassVar[Plan | None] = None

    def write_fields(self, out: list[Buffer]) -> None:
        """Append this record's field encodings to ``out`` (no frame header)."""
        plan = self._PLAN
        assert plan is not None, f"{type(self).__name__} has no compiled layout"
        plan.write(self, out)

    @classmethod
    def read_fields(cls, body: memoryview, pos: int) -> tuple[Self, int]:
        """Decode one record at ``pos``; return it and the position after it. Raises ProtocolError."""
        plan = cls._PLAN
        assert plan is not None, f"{cls.__name__} has no compiled layout"
        return cast(tuple[Self, int], plan.read(body, pos))


R = TypeVar("R", bound=type[WireRecord])


def compile_layout(cls: R) -> R:
    """Class decorator: compile ``cls.LAYOUT`` against its dataclass fields into ``cls._PLAN``."""
    if cls.LAYOUT is not None:
        names = [f.name for f in dataclasses.fields(cast(Any, cls))]
        cls._PLAN = Plan(names, cls.LAYOUT, cls)
    return cls


class Record(Kind):
    """A nested :class:`WireRecord` (e.g. ``ChunkInfo``) encoded inline, fields back to back."""

    __slots__ = ("cls",)

    def __init__(self, cls: type[WireRecord], min_size: int) -> None:
        super().__init__(cls.__name__, min_size)
        self.cls = cls

    def read(self, body: memoryview, pos: int) -> tuple[WireRecord, int]:
        return self.cls.read_fields(body, pos)

    def write(self, value: WireRecord, out: list[Buffer]) -> None:
        value.write_fields(out)
