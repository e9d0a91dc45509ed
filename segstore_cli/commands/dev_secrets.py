"""``segstore dev-secrets DIR``: the secrets ``docker-compose.yml`` mounts, made for a development cluster.

Five files in ``DIR``, the names the compose file's ``secrets:`` reads:

``ca.pem``             a throwaway CA's certificate (its key is not kept: nothing else can be signed with it), 0644
``server.pem``         the servers' certificate, signed by that CA, naming the compose services' host names (and
                       ``localhost``, ``127.0.0.1``, ``::1`` and any ``--host``), 0644
``server.key``         its private key (PKCS#8, unencrypted), 0600
``passwd``             the controller's password file (``segstore auth``'s format) with one user, by default
                       ``admin`` with ``prn::*,READ_UPDATE``; its password printed, or read from standard input, 0600
``token-signing-key``  the key the controller and the segment stores sign and check delegation tokens with, 0600

A new ``DIR`` is made mode 0700. Nothing is overwritten unless ``--force``. A production cluster takes its
certificates from its own CA and its users from ``segstore auth add-user``; these are for a cluster on one machine.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import os
import secrets
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from segstore_cli.arguments import Subparsers
from segstore_cli.private_files import write_private
from segstore_shared.auth.passwords import PasswordFile

if TYPE_CHECKING:
    from cryptography import x509

COMPOSE_HOSTS = ("controller", "segmentstore-1", "segmentstore-2", "segmentstore-3")
"""The host names ``docker-compose.yml``'s segstore servers advertise (its service names); the certificate names
them all (tests/system/test_compose_commands.py checks it against the compose file)."""

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
"""Names and addresses of this machine, where the compose file publishes the servers' ports."""

FILES = ("ca.pem", "server.pem", "server.key", "passwd", "token-signing-key")
"""The files made, in the order written."""

PRIVATE = frozenset({"server.key", "passwd", "token-signing-key"})
"""The files only their owner may read (mode 0600); the certificates are 0644."""

ADMIN_ACL = "prn::*,READ_UPDATE"
"""The user's ACL: everything."""


def add_parser(sub: Subparsers) -> None:
    """Add ``dev-secrets`` to the ``segstore`` command line."""
    ds = sub.add_parser(
        "dev-secrets",
        help="make the TLS certificates, password file and token signing key docker-compose.yml mounts",
        description="Write DIR/ca.pem, server.pem, server.key (0600), passwd (0600) and token-signing-key (0600) "
        "for a development cluster: a throwaway CA (its key is not kept), a server certificate naming the compose "
        f"services ({', '.join(COMPOSE_HOSTS)}) and {', '.join(LOCAL_HOSTS)}, one user with every permission, and "
        "a random signing key. Existing files are left alone unless --force.",
    )
    ds.add_argument("directory", metavar="DIR", help="where to write the files (created if missing), e.g. ./secrets")
    ds.add_argument("--user", default="admin", help="the password file's user (default admin)")
    ds.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the user's password from the first line of standard input (default: a random one, printed)",
    )
    ds.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="another host name or IP address the server certificate names (repeatable), e.g. this machine's name",
    )
    ds.add_argument("--valid-days", type=int, default=365, help="how long the certificates are valid (default 365)")
    ds.add_argument("--force", action="store_true", help="replace files that exist")
    ds.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the five files; exit 1 (one line) if one exists without --force, 2 on a bad flag or password."""
    directory = Path(args.directory)
    if args.valid_days < 1:
        return _fail("--valid-days must be at least 1", 2)
    if directory.exists() and not directory.is_dir():
        return _fail(f"{directory}: not a directory", 1)
    existing = [name for name in FILES if (directory / name).exists()]
    if existing and not args.force:
        return _fail(f"{directory / existing[0]} exists (--force replaces {', '.join(existing)})", 1)
    if args.password_stdin:
        password = sys.stdin.readline().removesuffix("\n").removesuffix("\r")
        if not password:
            return _fail("the password read from standard input is empty", 2)
    else:
        password = secrets.token_urlsafe(18)
    try:
        passwd = PasswordFile(source=str(directory / "passwd")).with_user(args.user, password, ADMIN_ACL).dump()
        hosts = _hosts(args.host)
    except ValueError as error:
        return _fail(str(error), 2)
    ca_pem, server_pem, key_pem = make_certificates(hosts, datetime.timedelta(days=args.valid_days))
    signing_key = base64.b64encode(secrets.token_bytes(32)).decode("ascii") + "\n"
    contents = {
        "ca.pem": ca_pem,
        "server.pem": server_pem,
        "server.key": key_pem,
        "passwd": passwd,
        "token-signing-key": signing_key,
    }
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # a new directory: its owner only
    for name in FILES:
        write_private(directory / name, contents[name])
        if name not in PRIVATE:
            os.chmod(directory / name, 0o644)
    print(f"wrote {', '.join(FILES)} in {directory}; the certificate names {', '.join(hosts)}")
    if args.password_stdin:
        print(f"user {args.user}: the password given")
    else:
        print(f"user {args.user}, password: {password}")
    return 0


def _hosts(extra: list[str]) -> list[str]:
    """The names the certificate holds: the compose services', this machine's, then ``--host``'s, each once."""
    hosts: list[str] = []
    for host in (*COMPOSE_HOSTS, *LOCAL_HOSTS, *extra):
        if not host or (any(c.isspace() or c in "/:," for c in host) and not _is_ip(host)):
            raise ValueError(f"--host {host!r}: not a host name or IP address")
        if host not in hosts:
            hosts.append(host)
    return hosts


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def make_certificates(hosts: list[str], valid: datetime.timedelta) -> tuple[str, str, str]:
    """A new CA's certificate, a server certificate it signs naming ``hosts`` (DNS names and IP addresses), and the
    server's private key: PEM texts. EC P-256 keys, SHA-256 signatures."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)  # clocks differ a little
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "segstore development CA")])
    ca_skid = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + valid)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(ca_skid, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address(host)) if _is_ip(host) else x509.DNSName(host) for host in hosts
    ]
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + valid)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_skid), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pem = serialization.Encoding.PEM
    return ca.public_bytes(pem).decode(), server.public_bytes(pem).decode(), key_pem.decode()


def _key_usage(signs_certificates: bool) -> x509.KeyUsage:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def _fail(what: str, code: int) -> int:
    print(f"segstore dev-secrets: {what}", file=sys.stderr)
    return code
