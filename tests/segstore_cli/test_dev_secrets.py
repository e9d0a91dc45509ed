"""``segstore dev-secrets DIR`` on real files: the CA, the server certificate and key, the password file and the
token signing key docker-compose.yml mounts; modes, refusal to overwrite, one-line errors.

Output is captured with ``capfd``: ``main`` enables faulthandler, which needs a real stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509

from segstore_cli.commands.dev_secrets import COMPOSE_HOSTS, FILES
from segstore_cli.main import main
from segstore_shared.auth.passwords import PasswordFile
from segstore_shared.auth.settings import signing_key

pytestmark = pytest.mark.unit


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _names(certificate: Path) -> set[str]:
    loaded = x509.load_pem_x509_certificate(certificate.read_bytes())
    alternative = loaded.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    ips = {str(ip) for ip in alternative.get_values_for_type(x509.IPAddress)}
    return set(alternative.get_values_for_type(x509.DNSName)) | ips


def test_dev_secrets_with_new_directory_writes_the_five_files(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "secrets"
    assert main(["dev-secrets", str(directory)]) == 0
    out = capfd.readouterr().out
    password = re.search(r"^user admin, password: (\S+)$", out, re.MULTILINE)
    assert password, out
    assert sorted(p.name for p in directory.iterdir()) == sorted(FILES), "a temporary file left behind"
    assert _mode(directory) == 0o700
    modes = {name: _mode(directory / name) for name in FILES}
    assert modes == {"ca.pem": 0o644, "server.pem": 0o644, "server.key": 0o600, "passwd": 0o600,
                     "token-signing-key": 0o600}  # fmt: skip
    acl = PasswordFile.load(directory / "passwd").authenticate("admin", password[1])
    assert acl is not None and str(acl) == "prn::*,READ_UPDATE"
    key = signing_key(argparse.Namespace(auth_token_signing_key_file=str(directory / "token-signing-key")), {})
    assert key is not None and len(key) >= 40
    assert _names(directory / "server.pem") == {*COMPOSE_HOSTS, "localhost", "127.0.0.1", "::1"}


def test_dev_secrets_certificate_serves_tls_the_ca_verifies(tmp_path: Path) -> None:
    """The key pairs with the certificate, and a client trusting only ca.pem accepts it for every name it holds."""
    assert main(["dev-secrets", str(tmp_path), "--host", "build-host.example", "--host", "10.1.2.3"]) == 0
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "server.pem", tmp_path / "server.key")  # raises if they do not pair
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    for name in (*COMPOSE_HOSTS, "localhost", "127.0.0.1", "build-host.example", "10.1.2.3"):
        client_side, server_side = ssl.MemoryBIO(), ssl.MemoryBIO()
        server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        connection = client.wrap_bio(client_side, server_side, server_hostname=name)
        accepted = server.wrap_bio(server_in, server_out, server_side=True)
        for _ in range(10):  # a TLS handshake in memory, each side feeding the other
            for side in (connection, accepted):
                with contextlib.suppress(ssl.SSLWantReadError):  # waiting for the other side's bytes
                    side.do_handshake()
            server_in.write(server_side.read())
            client_side.write(server_out.read())
        connection.do_handshake()  # done: raises ssl.SSLCertVerificationError if the name or the chain is wrong
    assert {"build-host.example", "10.1.2.3"} <= _names(tmp_path / "server.pem")


def test_dev_secrets_with_existing_file_refuses_unless_force(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "passwd").write_text("keep me\n")
    assert main(["dev-secrets", str(tmp_path)]) == 1
    err = capfd.readouterr().err
    assert err == f"segstore dev-secrets: {tmp_path / 'passwd'} exists (--force replaces passwd)\n"
    assert [p.name for p in tmp_path.iterdir()] == ["passwd"] and (tmp_path / "passwd").read_text() == "keep me\n"
    assert main(["dev-secrets", str(tmp_path), "--force"]) == 0
    assert (tmp_path / "passwd").read_text().startswith("admin:") and _mode(tmp_path / "passwd") == 0o600


def test_dev_secrets_with_password_stdin_uses_it_and_prints_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("given-pw ✓\n"))
    assert main(["dev-secrets", str(tmp_path), "--password-stdin", "--user", "ops"]) == 0
    out = capfd.readouterr().out
    assert "given-pw" not in out and "user ops: the password given" in out
    assert PasswordFile.load(tmp_path / "passwd").authenticate("ops", "given-pw ✓") is not None


@pytest.mark.parametrize(
    ("argv", "stdin", "error"),
    [
        (["--password-stdin"], "\n", "segstore dev-secrets: the password read from standard input is empty"),
        (["--host", "a b"], "", "segstore dev-secrets: --host 'a b': not a host name or IP address"),
        (["--user", "a:b"], "", "segstore dev-secrets: "),
        (["--valid-days", "0"], "", "segstore dev-secrets: --valid-days must be at least 1"),
    ],
)
def test_dev_secrets_with_bad_input_fails_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    argv: list[str],
    stdin: str,
    error: str,
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert main(["dev-secrets", str(tmp_path / "s"), *argv]) == 2
    err = capfd.readouterr().err
    assert err.startswith(error) and err.count("\n") == 1, err
    assert not (tmp_path / "s").exists(), "nothing written"


def test_dev_secrets_with_a_file_as_directory_fails_in_one_line(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("")
    assert main(["dev-secrets", str(tmp_path / "f")]) == 1
    assert capfd.readouterr().err == f"segstore dev-secrets: {tmp_path / 'f'}: not a directory\n"
