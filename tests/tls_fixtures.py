"""Certificates for the TLS tests, made at test time by a throwaway CA (trustme); nothing is committed.

:func:`make_tls_files` writes, under a directory: the CA's certificate (what clients trust), a server
certificate for ``localhost`` (subjectAltName ``DNS:localhost`` only, as Pravega's Rust clients need a host
name) with its key, and a client certificate from the same CA for mutual TLS.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca: Path
    """The CA certificate (PEM): the trust store."""
    cert: Path
    """Server certificate for ``localhost`` (PEM, leaf then chain)."""
    key: Path
    client_cert: Path
    """A client certificate from the same CA (mutual TLS)."""
    client_key: Path


def make_tls_files(directory: Path, server_names: tuple[str, ...] = ("localhost",)) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="segstore test CA")
    server = ca.issue_cert(*server_names)
    client = ca.issue_cert("segstore-client")
    files = TlsFiles(
        ca=directory / "ca.pem",
        cert=directory / "server.pem",
        key=directory / "server.key",
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
    )
    ca.cert_pem.write_to_path(str(files.ca))
    server.private_key_pem.write_to_path(str(files.key))
    server.cert_chain_pems[0].write_to_path(str(files.cert))
    for extra in server.cert_chain_pems[1:]:
        extra.write_to_path(str(files.cert), append=True)
    client.private_key_pem.write_to_path(str(files.client_key))
    client.cert_chain_pems[0].write_to_path(str(files.client_cert))
    return files
