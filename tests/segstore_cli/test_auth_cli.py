"""``segstore auth add-user`` and ``segstore auth check`` on real files (segstore_cli.auth_commands).

Output is captured with ``capfd``: ``main`` enables faulthandler, which needs a real stderr.
"""

from __future__ import annotations

import getpass
import io
import stat
from pathlib import Path

import pytest

from segstore_cli.main import main
from segstore_shared.auth.acl import Permission, scope, stream
from segstore_shared.auth.passwords import (
    DEFAULT_ITERATIONS,
    PRAVEGA_ITERATIONS,
    PasswordFile,
    hash_password,
    iterations_of,
)

pytestmark = pytest.mark.unit

# a file as Pravega's admin tool writes it (user admin, password 1111_aaaa, as Pravega's sample config/passwd)
ADMIN_HASH = hash_password("1111_aaaa", iterations=PRAVEGA_ITERATIONS)
ADMIN_LINE = f"admin:{ADMIN_HASH}:prn::*,READ_UPDATE;\n"

PASSWORD = "s3cr3t:with:colons ✓"


def _add_user(
    monkeypatch: pytest.MonkeyPatch, path: Path, user: str, password: str, *extra: str, fast: bool = True
) -> int:
    """``auth add-user``; ``fast``: with Pravega's 5,000 iterations unless ``extra`` names a count (the default
    600,000 takes seconds on a loaded machine)."""
    monkeypatch.setattr("sys.stdin", io.StringIO(password + "\n"))
    if fast and "--iterations" not in extra:
        extra = (*extra, "--iterations", str(PRAVEGA_ITERATIONS))
    return main(["auth", "add-user", "--password-file", str(path), "--user", user, "--password-stdin", *extra])


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_add_user_with_new_file_writes_private_hashed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "passwd"
    assert _add_user(monkeypatch, path, "alice", PASSWORD, "--acl", "prn::/scope:s/*,READ_UPDATE") == 0
    assert capfd.readouterr().out == f"added user alice in {path}\n"
    assert _mode(path) == 0o600
    text = path.read_text(encoding="utf-8")
    assert PASSWORD not in text and "s3cr3t" not in text
    assert text.startswith("alice:") and text.endswith(":prn::/scope:s/*,READ_UPDATE\n")
    acl = PasswordFile.load(path).authenticate("alice", PASSWORD)
    assert acl is not None and acl.allows(stream("s", "t"), Permission.READ_UPDATE)
    assert not acl.allows(scope("s"), Permission.READ)
    assert PasswordFile.load(path).authenticate("alice", "wrong") is None
    assert [p.name for p in tmp_path.iterdir()] == ["passwd"]  # no temporary file left behind


def test_add_user_with_existing_user_replaces_and_keeps_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "passwd"
    path.write_text("# managed by hand\n" + ADMIN_LINE)
    path.chmod(0o644)
    assert _add_user(monkeypatch, path, "bob", "first", "--acl", "prn::*,READ") == 0
    assert _add_user(monkeypatch, path, "admin", "new-admin-pw", "--acl", "prn::*,READ_UPDATE;") == 0
    assert _add_user(monkeypatch, path, "bob", "second") == 0
    passwords = PasswordFile.load(path)
    assert passwords.lines[0] == "# managed by hand"
    assert list(passwords.users) == ["admin", "bob"]
    assert passwords.authenticate("admin", "1111_aaaa") is None
    assert passwords.authenticate("admin", "new-admin-pw") is not None
    assert passwords.authenticate("bob", "first") is None
    bob = passwords.authenticate("bob", "second")
    assert bob is not None and bob.entries == ()  # no --acl: granted nothing
    assert _mode(path) == 0o600
    assert ADMIN_HASH not in path.read_text()


def test_add_user_with_terminal_prompts_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter(["typed", "typed"])
    prompts: list[str] = []

    def fake_getpass(prompt: str = "") -> str:
        prompts.append(prompt)
        return next(answers)

    monkeypatch.setattr(getpass, "getpass", fake_getpass)
    path = tmp_path / "passwd"
    assert main(["auth", "add-user", "--password-file", str(path), "--user", "u"]) == 0
    assert prompts == ["Password: ", "Password again: "]
    assert PasswordFile.load(path).authenticate("u", "typed") is not None


def test_add_user_with_differing_passwords_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    answers = iter(["one", "two"])
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": next(answers))
    path = tmp_path / "passwd"
    assert main(["auth", "add-user", "--password-file", str(path), "--user", "u"]) == 2
    assert "the passwords differ" in capfd.readouterr().err
    assert not path.exists()


@pytest.mark.parametrize(("user", "password", "reason"), [("u", "", "empty"), ("a:b", "pw", "user name")])
def test_add_user_with_bad_input_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], user: str, password: str,
    reason: str,
) -> None:  # fmt: skip
    path = tmp_path / "passwd"
    assert _add_user(monkeypatch, path, user, password) == 2
    err = capfd.readouterr().err
    assert reason in err and (not password or password not in err)
    assert not path.exists()


def test_add_user_with_malformed_acl_warns_and_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "passwd"
    assert _add_user(monkeypatch, path, "u", "pw", "--acl", "prn::*,write") == 0
    assert "warning: user 'u': ACL entry 1 'prn::*,write' is not" in capfd.readouterr().err
    acl = PasswordFile.load(path).authenticate("u", "pw")
    assert acl is not None and acl.entries == ()


def test_add_user_with_lines_after_empty_line_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "passwd"
    original = ADMIN_LINE + "\n# after the stop\n"
    path.write_text(original)
    assert _add_user(monkeypatch, path, "u", "pw") == 1
    assert f"{path} line 2 is empty" in capfd.readouterr().err
    assert path.read_text() == original


def test_add_user_with_unparsable_file_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "passwd"
    path.write_text("no-colon-here\n")
    assert _add_user(monkeypatch, path, "u", "pw") == 1
    assert f"{path} line 1" in capfd.readouterr().err
    assert path.read_text() == "no-colon-here\n"


def test_check_with_pravega_style_file_prints_users_not_hashes(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "passwd"
    path.write_text(ADMIN_LINE + f"bob:{ADMIN_HASH}\ncarol:{ADMIN_HASH}:prn::/,READ;bad\n")
    assert main(["auth", "check", "--password-file", str(path)]) == 0
    out = capfd.readouterr().out
    assert out.splitlines() == [
        f"{path}: 3 user(s)",
        "  admin: prn::*,READ_UPDATE",
        "  bob: (no permissions)",
        "  carol: prn::/,READ",
        "warnings:",
        f"  {path} line 2 (user 'bob'): no ACL; this user can log in but is granted nothing",
        f"  {path} line 3 (user 'carol'): ACL entry 2 'bad' is not 'pattern,PERMISSION' with PERMISSION one of "
        "NONE, READ, READ_UPDATE: ignored",
    ]
    assert ADMIN_HASH[:16] not in out


def test_check_with_missing_file_exits_1(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "missing"
    assert main(["auth", "check", "--password-file", str(path)]) == 1
    assert f"cannot read password file {path}" in capfd.readouterr().err


def test_auth_with_no_subcommand_is_usage_error() -> None:
    with pytest.raises(SystemExit) as info:
        main(["auth"])
    assert info.value.code == 2


def test_add_user_with_iterations_stores_that_count_and_warns_below_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "passwd"
    path.write_text(ADMIN_LINE)  # Pravega's 5,000-iteration entry
    assert _add_user(monkeypatch, path, "fast", "pw", "--iterations", "5000") == 0
    assert "warning: 5,000 iterations, fewer than 600,000" in capfd.readouterr().err
    assert _add_user(monkeypatch, path, "modern", "pw", fast=False) == 0
    assert "warning" not in capfd.readouterr().err
    passwords = PasswordFile.load(path)
    assert iterations_of(passwords.users["fast"].password_hash) == PRAVEGA_ITERATIONS
    assert iterations_of(passwords.users["modern"].password_hash) == DEFAULT_ITERATIONS
    assert passwords.authenticate("admin", "1111_aaaa") is not None
    assert passwords.authenticate("modern", "pw") is not None


def test_add_user_with_too_few_iterations_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    assert _add_user(monkeypatch, tmp_path / "passwd", "weak", "pw", "--iterations", "1000") == 2
    assert "--iterations must be between 5,000 (Pravega's) and 10,000,000, not 1,000" in capfd.readouterr().err
    assert not (tmp_path / "passwd").exists()
