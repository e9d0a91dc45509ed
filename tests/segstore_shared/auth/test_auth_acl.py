"""Resources, permissions and ACL matching with Pravega's meaning (segstore_shared.auth.acl).

The matching examples are those of Pravega's AclAuthorizerImplTest, as the research notes list them.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from segstore_shared.auth.acl import (
    Acl,
    AclEntry,
    Permission,
    java_split,
    key_value_table,
    raw_stream,
    reader_group,
    root,
    scope,
    stream,
)

pytestmark = pytest.mark.unit

ABC_RESOURCES = {
    "scope": scope("abc"),
    "stream": stream("abc", "xyz"),
    "reader_group": reader_group("abc", "rg"),
    "kvt": key_value_table("abc", "table"),
}


def _acl(text: str) -> Acl:
    return Acl.parse(text)


def test_permission_with_order() -> None:
    assert Permission.NONE < Permission.READ < Permission.READ_UPDATE
    assert Permission.from_name("READ") is Permission.READ
    assert Permission.from_name("read") is None and Permission.from_name("__class__") is None


def test_resource_builders_with_pravega_strings() -> None:
    assert root() == "prn::/"
    assert scope("s") == "prn::/scope:s"
    assert stream("s", "t") == "prn::/scope:s/stream:t"
    assert reader_group("s", "r") == "prn::/scope:s/reader-group:r"
    assert key_value_table("s", "k") == "prn::/scope:s/key-value-table:k"


@pytest.mark.parametrize(
    ("name", "resource"),
    [
        ("_RGmyrg", "prn::/scope:s/reader-group:myrg"),
        ("_RGa_RGb", "prn::/scope:s/reader-group:ab"),  # Java String.replace: every occurrence
        ("_MARKt", "prn::/scope:s/stream:t"),
        ("_MARKa_MARKb", "prn::/scope:s/stream:ab"),
        ("_other", "prn::/scope:s/stream:_other"),
        ("t_RG", "prn::/scope:s/stream:t_RG"),
        ("rg_kvtable", "prn::/scope:s/stream:rg_kvtable"),
    ],
)
def test_stream_with_internal_names_mapped_as_pravega(name: str, resource: str) -> None:
    assert stream("s", name) == resource


def test_raw_stream_with_internal_name_not_mapped() -> None:
    assert raw_stream("s", "_RGmyrg") == "prn::/scope:s/stream:_RGmyrg"


def test_permission_for_with_scope_pattern_matches_scope_only() -> None:
    acl = _acl("prn::/scope:abc,READ_UPDATE")
    assert acl.permission_for(ABC_RESOURCES["scope"]) is Permission.READ_UPDATE
    for kind in ("stream", "reader_group", "kvt"):
        assert acl.permission_for(ABC_RESOURCES[kind]) is Permission.NONE, kind
    assert acl.permission_for(scope("abcd")) is Permission.NONE


def test_permission_for_with_scope_star_covers_children_not_scope() -> None:
    acl = _acl("prn::/scope:abc/*,READ")
    assert acl.permission_for(ABC_RESOURCES["scope"]) is Permission.NONE
    for kind in ("stream", "reader_group", "kvt"):
        assert acl.permission_for(ABC_RESOURCES[kind]) is Permission.READ, kind
    assert acl.permission_for(stream("abcd", "x")) is Permission.NONE


def test_permission_for_with_root_star_covers_scopes_children_and_root() -> None:
    acl = _acl("prn::/*,READ_UPDATE")
    for resource in (*ABC_RESOURCES.values(), scope("other"), root()):
        assert acl.permission_for(resource) is Permission.READ_UPDATE, resource


def test_permission_for_with_super_user_covers_everything() -> None:
    acl = _acl("prn::*,READ_UPDATE")
    for resource in (*ABC_RESOURCES.values(), root(), stream("s", "_RGx")):
        assert acl.allows(resource, Permission.READ_UPDATE), resource


def test_permission_for_with_root_pattern_covers_root_only() -> None:
    acl = _acl("prn::/,READ_UPDATE")
    assert acl.permission_for(root()) is Permission.READ_UPDATE
    assert acl.permission_for(scope("abc")) is Permission.NONE


def test_permission_for_with_wildcard_in_middle_and_end() -> None:
    any_scope = _acl("prn::/scope:*/stream:mystream,READ")
    assert any_scope.permission_for(stream("a", "mystream")) is Permission.READ
    assert any_scope.permission_for(stream("b", "mystream")) is Permission.READ
    assert any_scope.permission_for(stream("b", "mystream2")) is Permission.NONE
    prefix = _acl("prn::/scope:abc/stream:str*,READ")
    assert prefix.permission_for(stream("abc", "str")) is Permission.READ
    assert prefix.permission_for(stream("abc", "stream1")) is Permission.READ
    assert prefix.permission_for(stream("abc", "other")) is Permission.NONE


def test_permission_for_with_first_match_winning_even_if_none() -> None:
    acl = _acl("prn::/scope:abc/stream:secret,NONE;prn::/scope:abc/*,READ_UPDATE;prn::*,READ")
    assert acl.permission_for(stream("abc", "secret")) is Permission.NONE
    assert acl.permission_for(stream("abc", "open")) is Permission.READ_UPDATE
    assert acl.permission_for(stream("other", "x")) is Permission.READ
    later_wider = _acl("prn::*,READ;prn::/scope:abc/*,READ_UPDATE")
    assert later_wider.permission_for(stream("abc", "open")) is Permission.READ


def test_permission_for_with_legacy_entries_grants_nothing() -> None:
    acl = _acl("*,READ_UPDATE;abc/*,READ_UPDATE;/,READ_UPDATE")
    assert len(acl.entries) == 3
    for resource in (*ABC_RESOURCES.values(), root()):
        assert acl.permission_for(resource) is Permission.NONE


def test_permission_for_with_no_entries_is_none() -> None:
    assert Acl().permission_for(root()) is Permission.NONE
    assert not Acl().allows(root(), Permission.READ)
    assert Acl().allows(root(), Permission.NONE)


def test_permission_for_with_regex_characters_literal() -> None:
    acl = _acl("prn::/scope:a.b/*,READ;prn::/scope:x+/*,READ")
    assert acl.permission_for(stream("a.b", "t")) is Permission.READ
    assert acl.permission_for(stream("axb", "t")) is Permission.NONE  # Java would match ('.' is a regex there)
    assert acl.permission_for(stream("x+", "t")) is Permission.READ
    assert acl.permission_for(stream("xx", "t")) is Permission.NONE


def test_allows_with_permission_order() -> None:
    acl = _acl("prn::/scope:s/*,READ")
    assert acl.allows(stream("s", "t"), Permission.READ)
    assert acl.allows(stream("s", "t"), Permission.NONE)
    assert not acl.allows(stream("s", "t"), Permission.READ_UPDATE)


def test_parse_with_whitespace_trailing_semicolon_and_java_split() -> None:
    acl = _acl("  prn::/scope:a , READ ; prn::*,READ_UPDATE;  ")
    assert acl.entries == (AclEntry("prn::/scope:a", Permission.READ), AclEntry("prn::*", Permission.READ_UPDATE))
    assert str(acl) == "prn::/scope:a,READ;prn::*,READ_UPDATE"
    # Java's split drops trailing empty strings, so a trailing ',' after the permission is accepted
    assert _acl("prn::*,READ,").entries == (AclEntry("prn::*", Permission.READ),)


@pytest.mark.parametrize(
    "entry",
    ["prn::*", "prn::*,", ",READ", "prn::*,Read", "prn::*,READ,NONE", "prn::*,WRITE", "prn::*,,READ", ""],
)
def test_parse_with_malformed_entry_ignored(entry: str) -> None:
    acl, warnings = Acl.parse_with_warnings(f"{entry};prn::/,READ")
    assert acl.entries == (AclEntry("prn::/", Permission.READ),)
    assert len(warnings) == 1 and "is not 'pattern,PERMISSION'" in warnings[0]


def test_parse_with_empty_text_has_no_entries_and_no_warning() -> None:
    for text in ("", "   ", ";", ";;"):
        acl, warnings = Acl.parse_with_warnings(text)
        assert acl.entries == () and warnings == [], text


def test_java_split_with_edge_cases() -> None:
    assert java_split("", ",") == [""]
    assert java_split("a", ",") == ["a"]
    assert java_split(",", ",") == []
    assert java_split(",a,,", ",") == ["", "a"]


_PATTERN_TEXT = st.text(alphabet=st.sampled_from("prn:/scope*abc-._ "), min_size=1, max_size=30)


@given(st.lists(st.tuples(_PATTERN_TEXT, st.sampled_from(list(Permission))), max_size=6))
def test_str_with_parse_round_trips(raw: list[tuple[str, Permission]]) -> None:
    entries = tuple(AclEntry(pattern.strip(), permission) for pattern, permission in raw if pattern.strip())
    acl = Acl(entries)
    assert Acl.parse(str(acl)) == acl


@given(st.text(max_size=60), st.text(max_size=40))
def test_parse_with_random_text_never_raises(text: str, resource: str) -> None:
    acl, warnings = Acl.parse_with_warnings(text)
    assert acl.permission_for(resource) in Permission
    assert isinstance(warnings, list)
