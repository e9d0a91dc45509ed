"""Password hashes, the password file and Basic credentials, in Pravega's formats (segstore_shared.auth.passwords)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segstore_shared.auth.acl import Permission, root, scope, stream
from segstore_shared.auth.passwords import (
    DEFAULT_ITERATIONS,
    PRAVEGA_ITERATIONS,
    CredentialsError,
    PasswordFile,
    PasswordFileError,
    UnknownAuthMethodError,
    basic_header,
    hash_password,
    iterations_of,
    parse_basic,
    verify_password,
)
from segstore_shared.errors import SegstoreError

pytestmark = pytest.mark.unit

# Pravega's shipped config/passwd (pravega/pravega @ 3142a01): user admin, password 1111_aaaa (the password is in
# config/standalone-config.properties). A fact about Pravega's format, copied as data.
PRAVEGA_ADMIN_HASH = (
    "353030303a633132666135376233353937356534613430383430373939343839333733616463363433616532363238653930346230333035"
    "393666643961316264616661393a363937633062366339663434386464326266333532646365306261396533643961386430626432383963"
    "3037626166663563613166333733653631383732353134643961303435613237653130353633633031653364366565316434626534656565"
    "636335663666306465663064376165313765646263656638373764396361"
)
PRAVEGA_PASSWD = f"admin:{PRAVEGA_ADMIN_HASH}:prn::*,READ_UPDATE;\n"


def _hash(password: str) -> str:
    return hash_password(password, iterations=1)  # fast, same format


# --- hashes -----------------------------------------------------------------------------------------------------


def test_verify_password_with_pravega_sample() -> None:
    assert verify_password("1111_aaaa", PRAVEGA_ADMIN_HASH)
    assert not verify_password("1111_aaab", PRAVEGA_ADMIN_HASH)
    assert not verify_password("", PRAVEGA_ADMIN_HASH)


def test_hash_password_with_fixed_salt_is_pravega_encoding() -> None:
    salt = bytes(range(32))
    stored = hash_password("pw", iterations=PRAVEGA_ITERATIONS, salt=salt)
    inner = bytes.fromhex(stored).decode("ascii")
    iterations, salt_hex, key_hex = inner.split(":")
    assert iterations == "5000" and salt_hex == salt.hex() and stored == stored.lower()
    assert key_hex == hashlib.pbkdf2_hmac("sha256", b"pw", salt, 5000, 64).hex()
    assert len(salt_hex) == 64 and len(key_hex) == 128


def test_hash_password_with_random_salt_differs_each_time() -> None:
    first, second = hash_password("same", iterations=7), hash_password("same", iterations=7)
    assert first != second and verify_password("same", first) and verify_password("same", second)


def test_verify_password_with_other_iteration_count_in_field() -> None:
    stored = hash_password("pw", iterations=7)
    assert bytes.fromhex(stored).decode().startswith("7:")
    assert verify_password("pw", stored) and not verify_password("pW", stored)


def test_hash_password_by_default_uses_owasps_count_and_pravegas_entries_still_verify() -> None:
    stored = hash_password("pw")
    assert iterations_of(stored) == DEFAULT_ITERATIONS == 600_000
    assert verify_password("pw", stored)
    assert iterations_of(PRAVEGA_ADMIN_HASH) == PRAVEGA_ITERATIONS == 5000


def test_with_user_stores_the_iteration_count_given_and_mixed_counts_authenticate() -> None:
    passwords = PasswordFile.parse(PRAVEGA_PASSWD).with_user("new", "new-pw", "prn::*,READ", iterations=20_000)
    assert iterations_of(passwords.users["new"].password_hash) == 20_000
    assert passwords.authenticate("new", "new-pw") is not None
    assert passwords.authenticate("admin", "1111_aaaa") is not None  # Pravega's 5,000-iteration entry
    assert passwords.authenticate("admin", "new-pw") is None
    with pytest.raises(ValueError, match="iterations"):
        passwords.with_user("bad", "pw", "", iterations=0)


def test_an_unknown_user_costs_the_commonest_count_of_the_file() -> None:
    passwords = PasswordFile.parse("").with_user("a", "pw", "", iterations=7).with_user("b", "pw", "", iterations=7)
    passwords = passwords.with_user("c", "pw", "", iterations=9)
    assert passwords.usual_iterations == 7
    assert PasswordFile.parse("").usual_iterations == DEFAULT_ITERATIONS
    assert passwords.authenticate("nobody", "pw") is None


def test_hash_password_with_bad_iterations_rejected() -> None:
    with pytest.raises(ValueError, match="iterations"):
        hash_password("pw", iterations=0)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40))
def test_verify_password_with_random_passwords_round_trips(password: str, other: str) -> None:
    stored = _hash(password)
    assert verify_password(password, stored)
    assert verify_password(other, stored) == (other.encode("utf-8", "replace") == password.encode("utf-8", "replace"))


def _field(inner: str) -> str:
    return inner.encode().hex()


@pytest.mark.parametrize(
    "stored",
    [
        "",
        "zz",
        "abc",  # odd length
        _field("5000:00"),  # two parts
        _field(f"5000:00:{'00' * 64}:00"),  # four parts
        _field(f"0:00:{'00' * 64}"),  # no iterations
        _field(f"-1:00:{'00' * 64}"),
        _field(f"99999999999:00:{'00' * 64}"),  # absurd iteration count
        _field(f"5000:00:{'00' * 32}"),  # key of the wrong length
        _field("5000:xx:yy"),
        "e9" * 10,  # not ASCII inside
    ],
)
def test_verify_password_with_malformed_field_is_false(stored: str) -> None:
    assert verify_password("pw", stored) is False


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_verify_password_with_garbage_never_raises(stored: str) -> None:
    assert verify_password("pw", stored) in (True, False)


# --- the password file --------------------------------------------------------------------------------------------


def test_parse_with_pravega_passwd_authenticates_admin() -> None:
    passwords = PasswordFile.parse(PRAVEGA_PASSWD)
    acl = passwords.authenticate("admin", "1111_aaaa")
    assert acl is not None and str(acl) == "prn::*,READ_UPDATE"
    assert acl.permission_for(root()) is Permission.READ_UPDATE
    assert acl.permission_for(stream("s", "t")) is Permission.READ_UPDATE
    assert passwords.warnings == ()


def test_authenticate_with_wrong_password_or_unknown_user_is_none() -> None:
    passwords = PasswordFile.parse(PRAVEGA_PASSWD)
    assert passwords.authenticate("admin", "wrong") is None
    assert passwords.authenticate("nobody", "1111_aaaa") is None
    assert passwords.authenticate("ADMIN", "1111_aaaa") is None


def test_parse_with_comments_and_crlf_and_acl_containing_colons() -> None:
    text = f"# users\r\nbob:{_hash('b')}:prn::/scope:a,READ;prn::/scope:a/*,READ_UPDATE\r\n# end\r\n"
    passwords = PasswordFile.parse(text)
    acl = passwords.authenticate("bob", "b")
    assert acl is not None
    assert acl.permission_for(scope("a")) is Permission.READ
    assert acl.permission_for(stream("a", "t")) is Permission.READ_UPDATE
    assert passwords.lines[0] == "# users" and passwords.lines[2] == "# end"
    assert passwords.warnings == ()


def test_parse_with_empty_line_stops_reading() -> None:
    text = f"a:{_hash('a')}:prn::*,READ\n\nb:{_hash('b')}:prn::*,READ\nnot a user line\n"
    passwords = PasswordFile.parse(text, source="pw.txt")
    assert list(passwords.users) == ["a"]
    assert passwords.authenticate("b", "b") is None
    assert passwords.stopped_at_line == 2
    assert passwords.warnings == ("pw.txt line 2 is empty: Pravega stops reading there, lines 3 to 4 are ignored",)


@pytest.mark.parametrize("ending", ["", "\n", "\n\n", "\r\n"])
def test_parse_with_trailing_newlines_has_no_warning(ending: str) -> None:
    passwords = PasswordFile.parse(f"a:{_hash('a')}:prn::*,READ{ending}")
    assert list(passwords.users) == ["a"] and passwords.warnings == () and passwords.stopped_at_line is None


def test_parse_with_two_fields_has_empty_acl_and_warning() -> None:
    passwords = PasswordFile.parse(f"a:{_hash('a')}\n", source="f")
    acl = passwords.authenticate("a", "a")
    assert acl is not None and acl.entries == ()
    assert acl.permission_for("prn::/") is Permission.NONE
    assert passwords.warnings == ("f line 1 (user 'a'): no ACL; this user can log in but is granted nothing",)


def test_parse_with_one_field_raises_naming_path_and_line_not_content() -> None:
    secret_line = "alice-has-password-hunter2"
    with pytest.raises(PasswordFileError) as info:
        PasswordFile.parse(f"# c\na:{_hash('a')}:\n{secret_line}\n", source="/etc/pw")
    message = str(info.value)
    assert "/etc/pw line 3" in message and "hunter2" not in message
    assert isinstance(info.value, SegstoreError)


def test_parse_with_malformed_acl_entries_warns_by_line_without_hash() -> None:
    stored = _hash("a")
    text = f"x:{stored}:prn::*,READ_UPDATE\na:{stored}:prn::/scope:s;prn::/,read;*,READ_UPDATE;prn::/scope:t,READ;\n"
    passwords = PasswordFile.parse(text, source="f")
    acl = passwords.authenticate("a", "a")
    assert acl is not None and str(acl) == "*,READ_UPDATE;prn::/scope:t,READ"
    assert acl.permission_for(scope("t")) is Permission.READ
    assert acl.permission_for(scope("s")) is Permission.NONE
    assert len(passwords.warnings) == 3
    assert all(w.startswith("f line 2 (user 'a'): ACL entry ") for w in passwords.warnings)
    assert "entry 1 'prn::/scope:s'" in passwords.warnings[0]
    assert "entry 2 'prn::/,read'" in passwords.warnings[1]
    assert "entry 3 '*,READ_UPDATE' does not start with 'prn'" in passwords.warnings[2]
    assert not any(stored in w or stored[:16] in w for w in passwords.warnings)


def test_parse_with_unusable_hash_and_duplicate_user_warns() -> None:
    text = f"a:{_hash('old')}:prn::*,READ\nb:plain-text-password:prn::*,READ\na:{_hash('new')}:prn::/,READ\n"
    passwords = PasswordFile.parse(text, source="f")
    assert passwords.authenticate("a", "old") is None
    new = passwords.authenticate("a", "new")
    assert new is not None and str(new) == "prn::/,READ"
    assert passwords.authenticate("b", "plain-text-password") is None
    assert passwords.warnings == (
        "f line 2 (user 'b'): the password field is not a Pravega password hash; this user can never log in",
        "f line 3: user 'a' again (line 1); this line wins",
    )
    assert not any("plain-text-password" in w for w in passwords.warnings)


def test_load_with_missing_file_raises_naming_path(tmp_path: Path) -> None:
    path = tmp_path / "missing"
    with pytest.raises(PasswordFileError, match=f"cannot read password file {path}"):
        PasswordFile.load(path)


def test_load_with_non_utf8_raises_naming_line(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_bytes(f"a:{_hash('a')}:prn::*,READ\nb\xff:x:y\n".encode("latin-1"))
    with pytest.raises(PasswordFileError, match=f"{path} line 2: not UTF-8"):
        PasswordFile.load(path)


def test_load_with_pravega_file_names_source(tmp_path: Path) -> None:
    path = tmp_path / "passwd"
    path.write_text(PRAVEGA_PASSWD + "\n" + "garbage\n")
    passwords = PasswordFile.load(path)
    assert passwords.source == str(path) and passwords.authenticate("admin", "1111_aaaa") is not None
    assert passwords.warnings[0].startswith(f"{path} line 2 is empty")


def test_dump_with_parsed_file_round_trips() -> None:
    text = f"# header\na:{_hash('a')}:prn::*,READ_UPDATE;\nb:{_hash('b')}\n# trailer\n"
    passwords = PasswordFile.parse(text)
    assert passwords.dump() == f"# header\na:{passwords.users['a'].password_hash}:prn::*,READ_UPDATE;\n" + (
        f"b:{passwords.users['b'].password_hash}:\n# trailer\n"
    )
    assert PasswordFile.parse(passwords.dump()) == passwords


def test_with_user_adds_and_replaces_in_place() -> None:
    passwords = PasswordFile.parse(f"# c\na:{_hash('a')}:prn::*,READ\nb:{_hash('b')}:prn::/,READ\na:{_hash('a2')}:\n")
    added = passwords.with_user("c", "pc", "prn::/scope:s/*,READ_UPDATE", iterations=7)
    assert [u for u in added.users] == ["a", "b", "c"]
    acl = added.authenticate("c", "pc")
    assert acl is not None and acl.allows(stream("s", "t"), Permission.READ_UPDATE)
    replaced = added.with_user("a", "new", "prn::*,READ", iterations=7)
    assert replaced.authenticate("a", "a") is None and replaced.authenticate("a", "a2") is None
    assert replaced.authenticate("a", "new") is not None
    reread = PasswordFile.parse(replaced.dump())
    assert [line if isinstance(line, str) else line.user for line in reread.lines] == ["# c", "a", "b", "c"]
    assert reread.authenticate("b", "b") is not None and reread.authenticate("c", "pc") is not None
    assert passwords.authenticate("a", "a2") is not None  # the original is unchanged


def test_with_user_with_malformed_acl_returns_warnings() -> None:
    updated = PasswordFile().with_user("u", "p", "prn::*;prn::/,READ", iterations=7)
    assert updated.warnings == (
        "user 'u': ACL entry 1 'prn::*' is not 'pattern,PERMISSION' with PERMISSION one of NONE, READ, "
        "READ_UPDATE: ignored",
    )


@pytest.mark.parametrize("user", ["", "a:b", "#admin", "a\nb", "a\rb"])
def test_with_user_with_bad_name_rejected(user: str) -> None:
    with pytest.raises(ValueError, match="user name"):
        PasswordFile().with_user(user, "p", "")


def test_with_user_with_multiline_acl_rejected() -> None:
    with pytest.raises(ValueError, match="line break"):
        PasswordFile().with_user("u", "p", "prn::*,READ\nx:y:z")


def test_repr_with_users_never_shows_hash() -> None:
    passwords = PasswordFile.parse(PRAVEGA_PASSWD)
    assert PRAVEGA_ADMIN_HASH not in repr(passwords) and PRAVEGA_ADMIN_HASH[:20] not in repr(passwords)
    assert "admin" in repr(passwords)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab:#,;\n\r *prn/READ_UPDATE"), max_size=80))
def test_parse_with_random_text_loads_or_raises_file_error(text: str) -> None:
    try:
        passwords = PasswordFile.parse(text)
    except PasswordFileError:
        return
    assert PasswordFile.parse(passwords.dump()).users.keys() == passwords.users.keys()


# --- Basic credentials ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "password"), [("admin", "1111_aaaa"), ("u", "p:a:s:s"), ("", ""), ("ünï", "pässwörd ✓"), ("a b", " ")]
)
def test_parse_basic_with_basic_header_round_trips(user: str, password: str) -> None:
    assert parse_basic(basic_header(user, password)) == (user, password)


def test_basic_header_with_known_value() -> None:
    assert basic_header("admin", "1111_aaaa") == "Basic " + base64.b64encode(b"admin:1111_aaaa").decode()
    assert basic_header("", "") == "Basic Og=="  # what the Rust client sends with no credentials configured


def test_basic_header_with_colon_in_user_rejected() -> None:
    with pytest.raises(ValueError, match="':'"):
        basic_header("a:b", "p")


def test_parse_basic_with_missing_padding_and_tab_separator() -> None:
    token = base64.b64encode(b"user:pw").decode().rstrip("=")
    assert parse_basic(f"Basic\t\t{token}") == ("user", "pw")


@pytest.mark.parametrize(
    ("value", "error", "reason"),
    [
        ("Bearer abc.def", UnknownAuthMethodError, "method Bearer"),
        ("basic dXNlcjpodW50ZXIy", UnknownAuthMethodError, "method basic"),
        ("dXNlcjpodW50ZXIy", UnknownAuthMethodError, "no supported method"),
        (" Basic dXNlcjpodW50ZXIy", UnknownAuthMethodError, "no supported method"),
        ("", UnknownAuthMethodError, "no supported method"),
        ("Basic", CredentialsError, "no credentials"),
        ("Basic ", CredentialsError, "no credentials"),
        ("Basic dXNlcjpodW50ZXIy!", CredentialsError, "not valid base64"),
        ("Basic dXNlcjpodW50ZXIy ", CredentialsError, "not valid base64"),
        ("Basic dXNlcjpodW50ZXIyx", CredentialsError, "wrong length"),
        ("Basic " + base64.b64encode(b"userhunter2").decode(), CredentialsError, "no ':'"),
        ("Basic " + base64.b64encode(b"user:hunter2\xff").decode(), CredentialsError, "not UTF-8"),
    ],
)
def test_parse_basic_with_malformed_value_raises_without_secret(value: str, error: type, reason: str) -> None:
    with pytest.raises(error) as info:
        parse_basic(value)
    message = str(info.value)
    assert reason in message
    assert "hunter2" not in message and "dXNlcjpodW50ZXIy" not in message and "userhunter2" not in message


@settings(max_examples=300)
@given(st.text(max_size=60))
def test_parse_basic_with_random_text_returns_or_raises_credentials_error(value: str) -> None:
    try:
        user, password = parse_basic(value)
    except CredentialsError:
        return
    assert value.startswith("Basic") and isinstance(user, str) and isinstance(password, str)
