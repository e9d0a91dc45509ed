"""TLS settings: contexts made from good files, and errors that name the setting and the path for bad ones."""

from __future__ import annotations

import ctypes
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import trustme
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    PrivateFormat,
    load_pem_private_key,
)
from tls_fixtures import TlsFiles, make_tls_files

from segstore_cli.main import build_parser
from segstore_shared.auth.tls import (
    TlsConfig,
    TlsConfigError,
    TrustConfig,
    is_ip_literal,
    is_tls_scheme,
    trust_from_cli,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def test_server_context_with_good_files_speaks_tls12_or_later(files: TlsFiles) -> None:
    context = TlsConfig(files.cert, files.key).server_context()
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert context.verify_mode == ssl.CERT_NONE  # no client certificate asked for


def test_server_context_with_ca_requires_client_certificates(files: TlsFiles) -> None:
    config = TlsConfig(files.cert, files.key, files.ca)
    assert config.requires_client_certificate
    assert config.server_context().verify_mode == ssl.CERT_REQUIRED
    pem = config.pem()
    assert b"BEGIN CERTIFICATE" in pem.certificate_chain and b"PRIVATE KEY" in pem.private_key
    assert pem.client_ca == files.ca.read_bytes()


def test_server_context_with_missing_certificate_names_the_option_and_path(files: TlsFiles, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(TlsConfigError, match=r"^--tls-cert .*nope\.pem: no such file$") as caught:
        TlsConfig(missing, files.key).check()
    assert (caught.value.option, caught.value.path) == ("tls_cert", str(missing))


def test_server_context_with_missing_key_or_ca_names_that_option(files: TlsFiles, tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match=r"^--tls-key .*gone\.key: no such file"):
        TlsConfig(files.cert, tmp_path / "gone.key").check()
    with pytest.raises(TlsConfigError, match=r"^--tls-ca .*gone-ca\.pem: no such file"):
        TlsConfig(files.cert, files.key, tmp_path / "gone-ca.pem").check()


def test_server_context_with_a_directory_says_so(files: TlsFiles, tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match=r"--tls-cert .*: is a directory"):
        TlsConfig(tmp_path, files.key).check()


def test_server_context_with_a_file_that_is_not_pem_says_so(files: TlsFiles, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("hello\n")
    with pytest.raises(TlsConfigError, match=r"--tls-cert .*junk.pem: holds no PEM certificate"):
        TlsConfig(junk, files.key).check()
    with pytest.raises(TlsConfigError, match=r"--tls-key .*junk.pem: holds no PEM private key"):
        TlsConfig(files.cert, junk).check()
    with pytest.raises(TlsConfigError, match=r"--tls-ca .*junk.pem: holds no PEM certificate"):
        TlsConfig(files.cert, files.key, junk).check()


def test_server_context_with_a_key_of_another_certificate_names_both(files: TlsFiles, tmp_path: Path) -> None:
    other = make_tls_files(tmp_path / "other")
    with pytest.raises(TlsConfigError, match=r"^--tls-key .*other/server\.key: does not belong to the certificate in "):
        TlsConfig(files.cert, other.key).check()
    with pytest.raises(TlsConfigError, match="does not belong"):
        TlsConfig(files.cert, other.key).pem()  # gRPC's files are checked the same way


def test_server_context_with_an_encrypted_key_says_to_decrypt_it(files: TlsFiles, tmp_path: Path) -> None:
    key = load_pem_private_key(files.key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(b"secret")))
    with pytest.raises(TlsConfigError, match=r"--tls-key .*encrypted.key: the private key is encrypted"):
        TlsConfig(files.cert, encrypted).check()


def test_server_context_with_an_unreadable_key_says_permission_denied(files: TlsFiles, tmp_path: Path) -> None:
    """Checked in a child process; as root, one without the capabilities that let root read any file."""
    key = tmp_path / "server.key"
    key.write_bytes(files.key.read_bytes())
    key.chmod(0o000)
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r})\n"
        "from segstore_shared.auth.tls import TlsConfig, TlsConfigError\n"
        f"try:\n    TlsConfig({str(files.cert)!r}, {str(key)!r}).check()\n"
        "except TlsConfigError as error:\n    print(error)\n"
    )
    preexec = _drop_file_read_capabilities if os.geteuid() == 0 else None
    result = subprocess.run(
        [sys.executable, "-c", code], preexec_fn=preexec, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == f"--tls-key {key}: not readable by this process (permission denied)", result.stderr


def _drop_file_read_capabilities() -> None:
    """In the child, before exec: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set, so
    the program it runs (as root) obeys file modes."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_capbset_drop, cap_dac_override, cap_dac_read_search = 24, 1, 2
    for capability in (cap_dac_override, cap_dac_read_search):
        if libc.prctl(pr_capbset_drop, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_trust_config_with_missing_trust_store_names_it(tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match=r"^trust_store .*ca\.pem: no such file"):
        TrustConfig(tmp_path / "ca.pem").client_context()
    with pytest.raises(TlsConfigError, match=r"^trust_store .*ca\.pem: no such file"):
        TrustConfig(tmp_path / "ca.pem").root_certificates()


def test_trust_config_with_half_a_client_identity_is_refused(files: TlsFiles) -> None:
    with pytest.raises(TlsConfigError, match="client_key: a client certificate needs both"):
        TrustConfig(files.ca, cert_path=files.client_cert)


def test_client_context_checks_host_names_unless_told_not_to(files: TlsFiles) -> None:
    strict = TrustConfig(files.ca).client_context()
    assert strict.check_hostname and strict.verify_mode == ssl.CERT_REQUIRED
    assert strict.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert strict.verify_flags & ssl.VERIFY_X509_PARTIAL_CHAIN  # a server's own certificate may be the anchor
    assert not TrustConfig(files.ca, verify_hostname=False).client_context().check_hostname
    assert TrustConfig(files.ca).client_context() is strict  # made once per setting
    system = TrustConfig().client_context()
    assert system.check_hostname and system.verify_mode == ssl.CERT_REQUIRED


def test_client_identity_is_checked_like_a_server_one(files: TlsFiles, tmp_path: Path) -> None:
    other = make_tls_files(tmp_path / "other")
    identity = TrustConfig(files.ca, cert_path=files.client_cert, key_path=files.client_key).client_identity()
    assert identity is not None and identity[0] == files.client_cert.read_bytes()
    with pytest.raises(TlsConfigError, match=r"client_key .*: does not belong to the certificate in client_cert"):
        TrustConfig(files.ca, cert_path=files.client_cert, key_path=other.client_key).client_context()


def test_root_certificates_are_the_trust_store_or_the_system_bundle(files: TlsFiles) -> None:
    assert TrustConfig(files.ca).root_certificates() == files.ca.read_bytes()
    bundle = ssl.get_default_verify_paths().cafile
    expected = Path(bundle).read_bytes() if bundle and os.path.isfile(bundle) else None
    assert TrustConfig().root_certificates() == expected


def test_from_cli_flags_win_over_the_environment(files: TlsFiles) -> None:
    args = build_parser().parse_args(["segmentstore", "--tls-cert", str(files.cert), "--tls-key", str(files.key)])
    env = {"SEGSTORE_TLS_CERT": "/env/cert.pem", "SEGSTORE_TLS_CA": str(files.ca)}
    assert TlsConfig.from_cli(args, env) == TlsConfig(files.cert, files.key, files.ca)
    none = build_parser().parse_args(["segmentstore"])
    assert TlsConfig.from_cli(none, {}) is None
    cert, key = files.cert.parent / "c.pem", files.cert.parent / "k.pem"  # named, never opened
    from_env = TlsConfig.from_cli(none, {"SEGSTORE_TLS_CERT": str(cert), "SEGSTORE_TLS_KEY": str(key)})
    assert from_env == TlsConfig(cert, key)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tls-cert", "/c.pem"], "--tls-key: --tls-cert was given without its private key"),
        (["--tls-key", "/k.pem"], "--tls-cert: --tls-key was given without a certificate"),
        (["--tls-ca", "/ca.pem"], "--tls-ca /ca.pem: client certificates need TLS"),
    ],
)
def test_from_cli_with_half_a_setting_names_what_is_missing(flags: list[str], message: str) -> None:
    with pytest.raises(TlsConfigError, match=message):
        TlsConfig.from_cli(build_parser().parse_args(["segmentstore", *flags]), {})


def test_trust_from_cli_prefers_the_trust_store_then_the_client_ca_then_the_fallback(files: TlsFiles) -> None:
    parse = build_parser().parse_args
    base = ["controller", "--zookeeper", "z:1", "--tls-cert", str(files.cert), "--tls-key", str(files.key)]
    assert trust_from_cli(parse(base), {}) == TrustConfig(None)
    assert trust_from_cli(parse(base), {}, fallback=files.cert) == TrustConfig(files.cert)
    trust_store = files.ca.parent / "t.pem"  # named, never opened
    store = trust_from_cli(parse([*base, "--tls-trust-store", str(trust_store)]), {})
    assert store == TrustConfig(trust_store)
    mutual = trust_from_cli(parse([*base, "--tls-ca", str(files.ca)]), {}, fallback=files.cert)
    assert mutual == TrustConfig(files.ca, cert_path=files.cert, key_path=files.key)  # presents its certificate


def test_uri_schemes_and_ip_literals() -> None:
    assert all(is_tls_scheme(s) for s in ("tls", "SSL", "tcps", "pravegas"))
    assert not any(is_tls_scheme(s) for s in ("tcp", "pravega", "http"))
    assert is_ip_literal("127.0.0.1") and is_ip_literal("::1") and is_ip_literal("[::1]")
    assert not is_ip_literal("localhost") and not is_ip_literal("segstore-1.example")


def test_a_ca_issued_certificate_verifies_with_the_ca_or_pinned_alone(files: TlsFiles) -> None:
    """What the contexts promise, checked in memory (no sockets): the CA as anchor, or the leaf itself."""
    server = TlsConfig(files.cert, files.key).server_context()
    for anchor in (files.ca, files.cert):
        client = TrustConfig(anchor).client_context()
        _handshake_in_memory(client, server, "localhost")
    stranger = trustme.CA()
    other = Path(str(files.ca) + ".stranger")
    stranger.cert_pem.write_to_path(str(other))
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake_in_memory(TrustConfig(other).client_context(), server, "localhost")


def _handshake_in_memory(client: ssl.SSLContext, server: ssl.SSLContext, host: str) -> None:
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=host)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(10):
        for name, obj in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    obj.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return
    raise AssertionError("handshake did not finish")


def test_empty_paths_are_refused_naming_the_option(files: TlsFiles) -> None:
    with pytest.raises(TlsConfigError, match=r"^--tls-cert: empty path$"):
        TlsConfig(" ", files.key)  # type: ignore[arg-type]
    with pytest.raises(TlsConfigError, match=r"^--tls-ca: empty path$"):
        TlsConfig(files.cert, files.key, "")  # type: ignore[arg-type]


def test_a_client_reads_a_replaced_trust_store_again_for_its_next_connection(tmp_path: Path) -> None:
    # a long-lived client (a Spark driver, a service) while its CA bundle is rotated: the next connection must trust
    # the new CA, not a context cached with the old one
    first, second = trustme.CA(organization_name="first CA"), trustme.CA(organization_name="second CA")
    bundle = tmp_path / "ca.pem"
    first.cert_pem.write_to_path(str(bundle))
    config = TrustConfig(bundle)

    def trusted() -> list[str]:
        issuers = [dict(part[0] for part in cert["subject"]) for cert in config.client_context().get_ca_certs()]
        return [issuer.get("organizationName", "") for issuer in issuers]

    assert trusted() == ["first CA"]
    assert config.client_context() is config.client_context()  # unchanged files: made once
    rotated = tmp_path / "ca.pem.new"
    second.cert_pem.write_to_path(str(rotated))
    os.replace(rotated, bundle)
    assert trusted() == ["second CA"]
