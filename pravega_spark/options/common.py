"""Option parsing shared by the ``segstore`` reader and writer: one place for the rules users see.

Spark options are case-insensitive strings. :class:`Options` looks them up case-insensitively, accepts
the Pravega Spark connector's names as aliases (so its users can move over), and every error is a
:class:`SegstoreOptionError` (a ``ValueError``) whose message starts with the option's name as the user
would write it, e.g. ``option 'maxBytesPerTrigger': must be a positive integer, got 'x'``.
Options are strict: :meth:`Options.of` with a kind refuses any option that kind does not take (a typo names
the closest known option), and lookups are held to :mod:`pravega_spark.options.names`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller_client.controller.channel import ControllerClientConfig
from controller_client.controller.uri import parse_controllers
from controller_client.errors import InvalidArgumentError
from controller_client.model import InvalidModelError, validate_scope_name, validate_stream_name
from pravega_spark.connection import shipped_file
from pravega_spark.errors import SegstoreOptionError
from pravega_spark.options.names import Kind, check_known, is_registered
from segstore_shared.deadline import DEFAULT_UNREACHABLE_TIMEOUT_S

DEFAULT_CONTROLLER = "tcp://127.0.0.1:9090"
DEFAULT_CONTROLLER_TIMEOUT_MS = round(DEFAULT_UNREACHABLE_TIMEOUT_S * 1000)
"""Option ``controllerTimeoutMs`` by default: the client library's budget for "unreachable"."""


@dataclass(frozen=True, slots=True)
class Options:
    """Case-insensitive view of Spark's option map, with aliases.

    With a ``kind`` (:meth:`of`), every option given must be one that kind takes, and every name looked up must be
    registered for it in :mod:`pravega_spark.options.names`; ``looked_up`` records the names asked for (tests hold
    the registry to the parsers with it)."""

    values: Mapping[str, str]
    kind: Kind | None = None
    looked_up: set[str] = field(default_factory=set, compare=False, repr=False)

    @classmethod
    def of(cls, options: Mapping[str, str], kind: Kind | None = None) -> Options:
        """Raises SegstoreOptionError naming the first option given that ``kind`` does not take."""
        if kind is not None:
            check_known([str(k) for k in options], kind)
        return cls({str(k).lower(): str(v) for k, v in options.items()}, kind)

    def raw(self, name: str, aliases: Iterable[str] = ()) -> str | None:
        """The value of ``name`` or of its first alias given; an empty string counts as given."""
        for key in (name, *aliases):
            assert self.kind is None or is_registered(key, self.kind), f"option {key!r} is not in option_names"
            self.looked_up.add(key.lower())
        for key in (name, *aliases):
            value = self.values.get(key.lower())
            if value is not None:
                return value
        return None

    def label(self, name: str, aliases: Iterable[str] = ()) -> str:
        """The name to put in an error: ``name``, or the alias the user gave instead (as it is spelled here)."""
        for alias in aliases:
            if alias.lower() in self.values and name.lower() not in self.values:
                return alias
        return name

    def required(self, name: str, aliases: Iterable[str] = ()) -> str:
        value = self.raw(name, aliases)
        if value is None or not value.strip():
            raise SegstoreOptionError(self.label(name, aliases), "is required")
        return value.strip()

    def string(self, name: str, default: str, aliases: Iterable[str] = ()) -> str:
        value = self.raw(name, aliases)
        return default if value is None or not value.strip() else value.strip()

    def integer(self, name: str, default: int | None, aliases: Iterable[str] = (), minimum: int = 1) -> int | None:
        value = self.raw(name, aliases)
        if value is None or not value.strip():
            return default
        label = self.label(name, aliases)
        try:
            number = int(value.strip())
        except ValueError:
            raise SegstoreOptionError(label, f"must be an integer >= {minimum}, got {value!r}") from None
        if number < minimum:
            raise SegstoreOptionError(label, f"must be an integer >= {minimum}, got {value!r}")
        return number

    def boolean(self, name: str, default: bool, aliases: Iterable[str] = ()) -> bool:
        value = self.raw(name, aliases)
        if value is None or not value.strip():
            return default
        text = value.strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise SegstoreOptionError(self.label(name, aliases), f"must be true or false, got {value!r}")


@dataclass(frozen=True, slots=True)
class StreamTarget:
    """Where to read or write: the controller, the stream, and what TLS trusts."""

    controller: str
    scope: str
    stream: str
    trust_store: str | None = None
    """Option ``trustStore``: with a ``tls://`` controller, the PEM file of trusted certificates (CAs) for the
    controller and the segment stores, read by the driver and by every executor at this same path or, where no
    file is there, as the file of that name Spark shipped (``spark.files``; see
    :func:`pravega_spark.connection.shipped_file`); None = the system's default trust store."""
    username: str | None = None
    """Options ``username`` and ``password``: the driver logs in with them; executors never get them (they work
    with a delegation token the driver gets for the stream, see :meth:`for_executors`)."""
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    """Option ``token`` (a delegation token from ``getDelegationToken``), or the token the driver handed to the
    executors: sent as ``Bearer`` to the controller, it grants exactly that stream."""

    def controller_config(self, **settings: Any) -> ControllerClientConfig:
        """The controller client's configuration: ``settings``, the trust store and the credentials."""
        return ControllerClientConfig(
            trust_store=shipped_file(self.trust_store),
            username=self.username,
            password=self.password,
            token=self.token,
            **settings,
        )

    def for_executors(self, token: str) -> StreamTarget:
        """This target as executors get it: the driver's delegation token instead of any password."""
        return dataclasses.replace(self, username=None, password=None, token=token)

    @property
    def logs_in(self) -> bool:
        """Whether the driver authenticates with a user and password (then executors need a token from it)."""
        return self.username is not None

    @classmethod
    def parse(cls, options: Options, require_stream: bool = True) -> StreamTarget:
        """``require_stream=False``: the stream may be left out (then ``stream`` is ``""``)."""
        controller = options.string("controller", DEFAULT_CONTROLLER)
        try:
            tls = parse_controllers(controller).tls  # one controller or a list of them, one scheme for all
        except InvalidArgumentError as error:
            raise SegstoreOptionError("controller", str(error)) from None
        trust_store = options.raw("trustStore", ("trust_store",))
        trust_store = trust_store.strip() if trust_store is not None and trust_store.strip() else None
        if trust_store is not None and not tls:
            raise SegstoreOptionError(
                "trustStore", f"is for TLS: the controller URI must then be tls://host:port, got {controller!r}"
            )
        username, password, token = options.raw("username"), options.raw("password"), options.raw("token")
        if (username is None) != (password is None):
            missing = "password" if password is None else "username"
            raise SegstoreOptionError(missing, "username and password go together")
        if token is not None and username is not None:
            raise SegstoreOptionError("token", "give either username and password or a token, not both")
        scope, stream = _scope_and_stream(options, require_stream)
        try:
            validate_scope_name(scope)
        except InvalidModelError as error:
            raise SegstoreOptionError("scope", str(error)) from None
        try:
            if stream or require_stream:
                validate_stream_name(stream)
        except InvalidModelError as error:
            raise SegstoreOptionError("stream", str(error)) from None
        return cls(controller, scope, stream, trust_store, username, password, token)


def _scope_and_stream(options: Options, require_stream: bool) -> tuple[str, str]:
    """Options ``scope`` and ``stream``, or Spark's ``path`` (``load("scope/stream")``) standing for both."""
    paths = options.raw("paths") if options.kind != "write" else None
    if paths is not None:
        raise SegstoreOptionError(
            "paths", f"a segstore query reads one stream: give load() one path 'scope/stream' or none, got {paths}"
        )
    path = options.raw("path")
    scope, stream = options.raw("scope"), options.raw("stream")
    if path is not None and path.strip():
        parts = path.strip().split("/")
        if len(parts) != 2 or not all(parts):
            raise SegstoreOptionError("path", f"must be 'scope/stream', got {path!r}")
        for option, given, value in (("scope", scope, parts[0]), ("stream", stream, parts[1])):
            if given is not None and given.strip() and given.strip() != value:
                raise SegstoreOptionError("path", f"{path!r} names {option} {value!r}, option '{option}' {given!r}")
        return parts[0], parts[1]
    found_scope = options.required("scope")
    if not require_stream and (stream is None or not stream.strip()):
        return found_scope, ""
    return found_scope, options.required("stream")
