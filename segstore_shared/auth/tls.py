"""TLS settings of servers and clients, and the ``ssl.SSLContext`` objects made from them.

:class:`TlsConfig` is a server's side: a certificate (PEM, the leaf first, then any intermediates), its
private key (PEM, unencrypted) and, optionally, ``ca_path``: the CA whose client certificates the server
requires (mutual TLS; without it no client certificate is asked for). :class:`TrustConfig` is a client's
side: which certificates it trusts (``trust_store``, a PEM file; None = the system's default trust), whether
the certificate must name the host connected to (``verify_hostname``), and an optional certificate of its
own for servers that require one.

Who uses them:

- the segment store's wire server: :meth:`TlsConfig.server_context`, TLS from the first byte on its one
  port, as Pravega does (its ``SslHandler`` is first in the pipeline; there is no STARTTLS);
- the controller's gRPC server: ``grpc.ssl_server_credentials`` from :meth:`TlsConfig.pem`. gRPC makes its
  own TLS context and negotiates ALPN ``h2`` itself (tonic, under Pravega's Rust and Python clients,
  refuses a connection without it);
- the segment client: :meth:`TrustConfig.client_context`; the controller client:
  ``grpc.ssl_channel_credentials`` from :meth:`TrustConfig.root_certificates`.

Rules: every context made here speaks TLS 1.2 or later (gRPC's own minimum is 1.2 as well). A client checks
the server's chain against its trust store, which may hold CA certificates or the server's own certificate
(a partial chain ending at a certificate in the store is accepted), and, unless ``verify_hostname`` is
False, that a subjectAltName of the certificate names the host it connected to. Pravega's Rust-based
clients (the official Python client among them) refuse IP literals as TLS host names, so servers with TLS
must be reached, and must advertise themselves, by host name (``localhost`` on one machine).

Files are read when a context is made (a server: once, at start; a client: once per process, setting and version
of the files, the context is cached: a file replaced on disk, such as a rotated CA bundle, is read again for the next
connection). Every problem with them raises :class:`TlsConfigError`, which names the setting
and the path: a missing, unreadable or non-PEM file, an encrypted key, a key that does not belong to the
certificate, a CA file without a certificate.

Sources of a server's settings, later ones winning: environment, command-line flags
(:func:`add_cli_arguments` + :meth:`TlsConfig.from_cli`, :func:`trust_from_cli`):

===================  ===========================  ===================================================
setting              environment                  flag
===================  ===========================  ===================================================
``tls_cert``         ``SEGSTORE_TLS_CERT``        ``--tls-cert PEM``
``tls_key``          ``SEGSTORE_TLS_KEY``         ``--tls-key PEM``
``tls_ca``           ``SEGSTORE_TLS_CA``          ``--tls-ca PEM`` (require client certificates)
``tls_trust_store``  ``SEGSTORE_TLS_TRUST_STORE`` ``--tls-trust-store PEM`` (controller and standalone:
                                                  what it trusts in segment stores; default ``tls_ca``)
===================  ===========================  ===================================================
"""

from __future__ import annotations

import argparse
import functools
import os
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from segstore_shared.errors import SegstoreError

TLS_SCHEMES = frozenset({"tls", "ssl", "tcps", "pravegas"})
"""URI schemes that mean TLS, as Pravega's clients read them (``tcp`` and ``pravega`` mean plain text)."""

_ENV = {
    "tls_cert": "SEGSTORE_TLS_CERT",
    "tls_key": "SEGSTORE_TLS_KEY",
    "tls_ca": "SEGSTORE_TLS_CA",
    "tls_trust_store": "SEGSTORE_TLS_TRUST_STORE",
}
_CERT_MARK = b"-----BEGIN CERTIFICATE-----"


def as_flag(option: str) -> str:
    """A server's TLS setting as its command-line flag (``tls_cert`` -> ``--tls-cert``); other names as they are."""
    return "--" + option.replace("_", "-") if option in _ENV else option


class TlsConfigError(SegstoreError, ValueError):
    """A TLS setting cannot be used; ``option`` names the setting, ``path`` its file, ``problem`` what is wrong.
    The message names a server's setting by its flag (``--tls-cert missing.pem: no such file``)."""

    def __init__(self, option: str, path: Path | str | None, problem: str) -> None:
        self.option = option
        self.path = None if path is None else str(path)
        self.problem = problem
        flag = as_flag(option)
        super().__init__(f"{flag} {path}: {problem}" if path is not None else f"{flag}: {problem}")


def _as_path(value: Path | str | None) -> Path | None:
    if value is None or isinstance(value, Path):
        return value
    return Path(value)


def _read(option: str, path: Path) -> bytes:
    """The bytes of ``path``; TlsConfigError naming ``option`` if it is missing, a directory or unreadable."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise TlsConfigError(option, path, "no such file") from None
    except IsADirectoryError:
        raise TlsConfigError(option, path, "is a directory, not a PEM file") from None
    except PermissionError:
        raise TlsConfigError(option, path, "not readable by this process (permission denied)") from None
    except OSError as error:
        raise TlsConfigError(option, path, f"cannot be read: {error.strerror or error}") from None


def _read_certificates(option: str, path: Path) -> bytes:
    data = _read(option, path)
    if _CERT_MARK not in data:
        raise TlsConfigError(option, path, "holds no PEM certificate (no '-----BEGIN CERTIFICATE-----' line)")
    return data


def _read_key(option: str, path: Path) -> bytes:
    data = _read(option, path)
    if b"PRIVATE KEY-----" not in data:
        raise TlsConfigError(option, path, "holds no PEM private key (no '-----BEGIN ... PRIVATE KEY-----' line)")
    if b"ENCRYPTED" in data:
        raise TlsConfigError(
            option, path, "the private key is encrypted; give it unencrypted (openssl pkey -in KEY -out PLAIN)"
        )
    return data


def _load_identity(
    context: ssl.SSLContext, cert_option: str, cert: Path, key_option: str, key: Path
) -> tuple[bytes, bytes]:
    """Check both files, load them into ``context``; returns (certificate chain, key) as read."""
    chain = _read_certificates(cert_option, cert)
    private_key = _read_key(key_option, key)
    try:
        context.load_cert_chain(cert, key, password=b"")
    except ssl.SSLError as error:
        text = f"{error.reason or ''} {error}".upper()
        if "KEY_VALUES_MISMATCH" in text or "KEY VALUES MISMATCH" in text:
            problem = f"does not belong to the certificate in {as_flag(cert_option)} {cert}"
            raise TlsConfigError(key_option, key, problem) from None
        raise TlsConfigError(cert_option, cert, f"cannot be loaded with {as_flag(key_option)} {key}: {error}") from None
    except OSError as error:  # the files changed or vanished since they were read
        raise TlsConfigError(cert_option, cert, f"cannot be loaded: {error}") from None
    return chain, private_key


def _load_trust(context: ssl.SSLContext, option: str, path: Path) -> bytes:
    data = _read_certificates(option, path)
    try:
        context.load_verify_locations(cafile=str(path))
    except (ssl.SSLError, OSError) as error:
        raise TlsConfigError(option, path, f"no usable certificate: {error}") from None
    return data


@dataclass(frozen=True, slots=True)
class ServerPem:
    """A server's PEM files as bytes, for gRPC (which makes its own TLS context)."""

    certificate_chain: bytes
    private_key: bytes
    client_ca: bytes | None


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """A server's TLS: certificate and key (PEM); with ``ca_path``, client certificates from that CA are
    required and verified (module docstring)."""

    cert_path: Path
    key_path: Path
    ca_path: Path | None = None

    def __post_init__(self) -> None:
        for name, option in (("cert_path", "tls_cert"), ("key_path", "tls_key"), ("ca_path", "tls_ca")):
            value = getattr(self, name)
            if isinstance(value, str) and not value.strip():
                raise TlsConfigError(option, None, "empty path")
            object.__setattr__(self, name, _as_path(value))

    @property
    def requires_client_certificate(self) -> bool:
        return self.ca_path is not None

    def server_context(self, alpn_protocols: Sequence[str] = ()) -> ssl.SSLContext:
        """A server context (TLS >= 1.2) with this certificate; raises TlsConfigError naming the setting."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_identity(context, "tls_cert", self.cert_path, "tls_key", self.key_path)
        if self.ca_path is not None:
            _load_trust(context, "tls_ca", self.ca_path)
            context.verify_mode = ssl.CERT_REQUIRED
        if alpn_protocols:
            context.set_alpn_protocols(list(alpn_protocols))
        return context

    def pem(self) -> ServerPem:
        """The files as bytes, checked as :meth:`server_context` checks them (gRPC reports bad ones poorly)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        chain, key = _load_identity(context, "tls_cert", self.cert_path, "tls_key", self.key_path)
        ca = _load_trust(context, "tls_ca", self.ca_path) if self.ca_path is not None else None
        return ServerPem(chain, key, ca)

    def check(self) -> None:
        """Raise TlsConfigError now if a file cannot be used (the commands call it before starting anything)."""
        self.server_context()

    def describe(self) -> str:
        return f"TLS ({'client certificates required' if self.ca_path is not None else 'server certificate'})"

    @classmethod
    def from_cli(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> TlsConfig | None:
        """The settings of the environment with the flags of :func:`add_cli_arguments` on top; None when
        neither gives a certificate. Raises TlsConfigError if only one of certificate and key is given."""
        values = _values(args, environ)
        cert, key, ca = values.get("tls_cert"), values.get("tls_key"), values.get("tls_ca")
        if cert is None and key is None:
            if ca is not None:
                raise TlsConfigError("tls_ca", ca, "client certificates need TLS: give --tls-cert and --tls-key too")
            return None
        if cert is None:
            raise TlsConfigError("tls_cert", None, "--tls-key was given without a certificate (--tls-cert)")
        if key is None:
            raise TlsConfigError("tls_key", None, "--tls-cert was given without its private key (--tls-key)")
        return cls(Path(cert), Path(key), Path(ca) if ca is not None else None)


@dataclass(frozen=True, slots=True)
class TrustConfig:
    """A client's TLS: what it trusts and, optionally, the certificate it presents (module docstring)."""

    trust_store: Path | None = None
    """PEM file of trusted certificates (CAs, or the servers' own); None = the system's default trust."""
    verify_hostname: bool = True
    """Whether the server's certificate must name the host connected to (turn off only for tests)."""
    cert_path: Path | None = None
    """A certificate to present to servers that require one (mutual TLS), with ``key_path``."""
    key_path: Path | None = None

    def __post_init__(self) -> None:
        for name in ("trust_store", "cert_path", "key_path"):
            object.__setattr__(self, name, _as_path(getattr(self, name)))
        if (self.cert_path is None) != (self.key_path is None):
            raise TlsConfigError("client_key", None, "a client certificate needs both cert_path and key_path")

    def client_context(self, alpn_protocols: tuple[str, ...] = ()) -> ssl.SSLContext:
        """A client context (TLS >= 1.2), made once per process, setting and version of its files (a trust store
        or client certificate replaced on disk, say a rotated CA bundle, is read again for the next connection);
        raises TlsConfigError."""
        return _client_context(self, alpn_protocols, _files_version(self.trust_store, self.cert_path, self.key_path))

    def root_certificates(self) -> bytes | None:
        """The trust store's bytes for gRPC; without one, the system's CA bundle (as OpenSSL finds it), or
        None (gRPC's own roots) where there is none. Raises TlsConfigError."""
        if self.trust_store is not None:
            return _load_trust(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), "trust_store", self.trust_store)
        bundle = ssl.get_default_verify_paths().cafile
        if bundle is None or not os.path.isfile(bundle):
            return None
        return _read("trust_store", Path(bundle))

    def client_identity(self) -> tuple[bytes, bytes] | None:
        """(certificate chain, private key) for gRPC, or None. Raises TlsConfigError."""
        if self.cert_path is None or self.key_path is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        return _load_identity(context, "client_cert", self.cert_path, "client_key", self.key_path)

    def describe(self) -> str:
        """The trust store, for messages: its path, or "the system's default trust store"."""
        where = str(self.trust_store) if self.trust_store is not None else "the system's default trust store"
        return where + ("" if self.verify_hostname else "; host names not checked")


def _files_version(*paths: Path | None) -> tuple[tuple[object, ...], ...]:
    """What tells one version of the files from the next: each file's identity, size and modification time (a
    missing file is left to the reading, which raises the error naming the setting)."""
    version: list[tuple[object, ...]] = []
    for path in paths:
        if path is None:
            continue
        try:
            status = path.stat()
        except OSError:
            version.append((str(path),))
            continue
        version.append((str(path), status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns))
    return tuple(version)


@functools.lru_cache(maxsize=64)
def _client_context(
    config: TrustConfig, alpn_protocols: tuple[str, ...], _files: tuple[tuple[object, ...], ...]
) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.trust_store is not None:
        _load_trust(context, "trust_store", config.trust_store)
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a server's own certificate may be the anchor
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = config.verify_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if config.cert_path is not None and config.key_path is not None:
        _load_identity(context, "client_cert", config.cert_path, "client_key", config.key_path)
    if alpn_protocols:
        context.set_alpn_protocols(list(alpn_protocols))
    return context


def is_tls_scheme(scheme: str) -> bool:
    """Whether a URI scheme means TLS (``tls``, ``ssl``, ``tcps``, ``pravegas``), case-insensitively."""
    return scheme.lower() in TLS_SCHEMES


def is_ip_literal(host: str) -> bool:
    """Whether ``host`` is an IPv4 or IPv6 address (Pravega's Rust clients refuse those as TLS host names)."""
    import ipaddress

    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _values(args: argparse.Namespace, environ: Mapping[str, str] | None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    values = {key: env[name] for key, name in _ENV.items() if env.get(name)}
    for key in _ENV:
        value = getattr(args, key, None)
        if value is not None and str(value).strip():
            values[key] = str(value)
    return values


def trust_from_cli(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None, fallback: Path | None = None
) -> TrustConfig:
    """What a controller trusts in segment stores: ``--tls-trust-store``, else ``--tls-ca``, else ``fallback``
    (the standalone passes its own certificate), else the system's trust. When client certificates are
    required (``--tls-ca``), the process presents its own ``--tls-cert``/``--tls-key`` to them."""
    values = _values(args, environ)
    store = values.get("tls_trust_store") or values.get("tls_ca")
    trust_store = Path(store) if store else fallback
    cert, key = values.get("tls_cert"), values.get("tls_key")
    mutual = values.get("tls_ca") is not None and cert is not None and key is not None
    return TrustConfig(
        trust_store,
        cert_path=Path(cert) if mutual and cert else None,
        key_path=Path(key) if mutual and key else None,
    )


def add_cli_arguments(parser: argparse.ArgumentParser, *, trust_store: bool = False) -> None:
    """Add ``--tls-cert``, ``--tls-key``, ``--tls-ca`` (and ``--tls-trust-store`` for a controller)."""
    group = parser.add_argument_group("TLS", "TLS on this process's ports (PEM files; default: plain text)")
    group.add_argument("--tls-cert", help="certificate (PEM, leaf first, then intermediates) ($SEGSTORE_TLS_CERT)")
    group.add_argument("--tls-key", help="its private key (PEM, unencrypted) ($SEGSTORE_TLS_KEY)")
    group.add_argument(
        "--tls-ca", help="require client certificates signed by this CA (PEM) (mutual TLS) ($SEGSTORE_TLS_CA)"
    )
    if trust_store:
        group.add_argument(
            "--tls-trust-store",
            help="certificates (PEM) trusted in segment stores (default --tls-ca, else the system's trust store) "
            "($SEGSTORE_TLS_TRUST_STORE)",
        )
