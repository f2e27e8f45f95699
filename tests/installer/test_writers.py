"""The format-aware writers: hive's parts go in and come out again, and everything else stays as it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hive.installer import documents, ownership
from hive.installer.errors import ConfigParseError, ConfigShapeError

HERE = Path("/home/me/.config/x.json")
HOOK = "/usr/bin/python3 -I -S /opt/hive/hive_hook.py claude-code Stop"
MCP = {("mcpServers", "hive"): {"type": "stdio", "command": "/opt/hive/bin/hive", "args": ["mcp"]}}
HOOKS = {("hooks", "Stop"): [{"hooks": [{"type": "command", "command": HOOK, "timeout": 5}]}]}


def round_trip(fmt: str, text: str, owned: dict[tuple[str, ...], Any]) -> tuple[str, str]:
    """(text with hive's parts, text after taking them out again)."""
    doc = documents.parse(fmt, HERE, text)
    applied = ownership.apply(doc, owned)
    wired = doc.render()
    again = documents.parse(fmt, HERE, wired)
    ownership.strip(again, applied.records, applied.created)
    return wired, again.render()


@pytest.mark.parametrize("indent", ["  ", "    ", "\t"])
def test_json_keeps_the_files_indentation_and_key_order_and_comes_back_exactly(indent: str) -> None:
    original = (
        f'{{\n{indent}"zeta": 1,\n{indent}"alpha": {{\n{indent}{indent}"b": [\n{indent}{indent}{indent}1\n'
        f"{indent}{indent}]\n{indent}}}\n}}\n"
    )
    wired, removed = round_trip("json", original, MCP)

    assert wired.startswith(f'{{\n{indent}"zeta": 1,\n{indent}"alpha"')
    assert f'\n{indent}"mcpServers": {{\n{indent}{indent}"hive": {{' in wired
    assert removed == original


def test_json_without_a_final_newline_stays_without_one() -> None:
    wired, removed = round_trip("json", '{\n  "a": 1\n}', MCP)
    assert not wired.endswith("\n") and removed == '{\n  "a": 1\n}'


def test_toml_keeps_comments_and_order_and_adds_only_hives_table() -> None:
    original = (
        '# mine\nmodel = "o3"  # favourite\n\n[mcp_servers.notes]\ncommand = "notes"\n\n'
        '[projects."/src"]\ntrust_level = "trusted"\n'
    )
    owned = {
        ("mcp_servers", "hive"): {
            "command": "/opt/hive/bin/hive",
            "args": ["mcp"],
            "default_tools_approval_mode": "approve",
        }
    }
    wired, removed = round_trip("toml", original, owned)

    assert wired.startswith('# mine\nmodel = "o3"  # favourite\n')
    assert '[mcp_servers.hive]\ncommand = "/opt/hive/bin/hive"\nargs = ["mcp"]\n' in wired
    assert "\n[mcp_servers]\n" not in wired  # no empty header of a table that only holds tables
    assert removed == original


def test_toml_into_an_empty_file_writes_just_the_table_and_removes_back_to_empty() -> None:
    owned = {("mcp_servers", "hive"): {"command": "hive", "args": ["mcp"], "env": {"A": "b"}}}
    wired, removed = round_trip("toml", "", owned)
    assert wired == '[mcp_servers.hive]\ncommand = "hive"\nargs = ["mcp"]\n\n[mcp_servers.hive.env]\nA = "b"\n'
    assert removed == ""


def test_hook_arrays_keep_the_persons_entries_first_and_in_order() -> None:
    mine = [
        {"hooks": [{"type": "command", "command": "notify-send done"}]},
        {"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]},
    ]
    doc = documents.parse("json", HERE, "{}")
    doc.set(("hooks",), {"Stop": mine})
    ownership.apply(doc, HOOKS)
    assert doc.get(("hooks", "Stop")) == [*mine, *HOOKS["hooks", "Stop"]]

    # Applying again changes nothing, even when the person added an entry after hive's since.
    later = {"hooks": [{"type": "command", "command": "log.sh"}]}
    doc.set(("hooks", "Stop"), [*doc.get(("hooks", "Stop")), later])
    before = doc.get(("hooks", "Stop"))
    ownership.apply(doc, HOOKS)
    assert doc.get(("hooks", "Stop")) == before


def test_an_outdated_hive_entry_is_replaced_not_duplicated() -> None:
    old = {"hooks": [{"type": "command", "command": "/old/bin/hive hook claude-code Stop"}]}
    mine = {"hooks": [{"type": "command", "command": "notify-send done"}]}
    doc = documents.parse("json", HERE, "{}")
    doc.set(("hooks",), {"Stop": [old, mine]})
    ownership.apply(doc, HOOKS)
    assert doc.get(("hooks", "Stop")) == [mine, *HOOKS["hooks", "Stop"]]


def test_a_group_shared_with_the_person_loses_only_hives_handler() -> None:
    shared = {"hooks": [{"type": "command", "command": "notify-send done"}, {"type": "command", "command": HOOK}]}
    assert ownership.strip_list([shared], []) == [{"hooks": [{"type": "command", "command": "notify-send done"}]}]


def test_flat_hook_entries_are_recognised_by_their_command_too() -> None:
    # Cursor's hooks.json: {"command": ...} entries without a nested "hooks" list.
    assert ownership.strip_list([{"command": "./format.sh"}, {"command": HOOK, "timeout": 5}], []) == [
        {"command": "./format.sh"}
    ]


def test_a_value_the_person_changed_since_setup_is_theirs_and_stays() -> None:
    doc = documents.parse("json", HERE, "{}")
    applied = ownership.apply(doc, MCP)
    doc.set(("mcpServers", "hive"), {"command": "my-own-hive"})
    ownership.strip(doc, applied.records, applied.created)
    assert doc.get(("mcpServers", "hive")) == {"command": "my-own-hive"}


def test_a_value_that_was_there_before_hive_is_put_back() -> None:
    doc = documents.parse("json", HERE, '{"version": 2, "mcpServers": {"hive": {"command": "older"}}}')
    applied = ownership.apply(doc, {("version",): 1, **MCP})
    ownership.strip(doc, applied.records, applied.created)
    assert (
        doc.render()
        == documents.parse("json", HERE, '{"version": 2, "mcpServers": {"hive": {"command": "older"}}}').render()
    )


def test_hives_parts_found_without_a_record_are_still_hives_to_remove() -> None:
    # Wired before the manifest existed (or by hand): the exact entry is recognisably hive's.
    doc = documents.parse("json", HERE, "{}")
    ownership.apply(doc, {**MCP, **HOOKS})
    wired = documents.parse("json", HERE, doc.render())
    applied = ownership.apply(wired, {**MCP, **HOOKS})
    ownership.strip(wired, applied.records, [("mcpServers",), ("hooks",)])
    assert wired.render().strip() == "{}"


def test_a_key_of_the_wrong_type_is_refused_with_what_to_fix() -> None:
    doc = documents.parse("json", HERE, '{"hooks": "none"}')
    with pytest.raises(ConfigShapeError) as caught:
        ownership.apply(doc, HOOKS)
    assert "'hooks' is a string" in str(caught.value) and "hive needs an object there" in str(caught.value)

    doc = documents.parse("json", HERE, '{"hooks": {"Stop": {"command": "x"}}}')
    with pytest.raises(ConfigShapeError, match=r"'hooks\.Stop' is an object"):
        ownership.apply(doc, HOOKS)


def test_broken_json_names_the_line_and_column() -> None:
    with pytest.raises(ConfigParseError) as caught:
        documents.parse("json", HERE, '{\n  "a": 1,\n  "b": 2,\n}\n')
    assert (caught.value.line, caught.value.column) == (4, 1)
    assert str(caught.value).startswith("/home/me/.config/x.json: line 4, column 1: ")
    assert "missing or extra comma" in str(caught.value)


def test_json_with_comments_is_refused_with_a_hint_about_them() -> None:
    with pytest.raises(ConfigParseError, match=r"has comments \(// or /\* \*/\)"):
        documents.parse("json", HERE, '{\n  // my servers\n  "mcp": {}\n}\n')


def test_a_json_file_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ConfigParseError, match="the top level is a JSON list"):
        documents.parse("json", HERE, "[1, 2]\n")


def test_broken_toml_names_the_line() -> None:
    with pytest.raises(ConfigParseError) as caught:
        documents.parse("toml", HERE, 'model = "o3"\n\n[mcp_servers.notes\ncommand = "x"\n')
    assert caught.value.line == 3
    assert "fix the TOML there" in str(caught.value)


def test_an_empty_json_file_counts_as_an_empty_object() -> None:
    assert documents.parse("json", HERE, "").get(("anything",)) is documents.MISSING


@pytest.mark.parametrize(
    "original",
    [
        'model = "o3"\n[mcp_servers.notes]\ncommand = "notes"\n',  # no blank line before the table
        "a = 1",  # no final newline
        "# only a comment\n\n\n",  # blank lines at the end are the person's
        '[mcp_servers]\nnotes = { command = "notes" }\n',  # the parent table written out, with inline entries
    ],
)
def test_toml_round_trips_byte_for_byte(original: str) -> None:
    owned = {("mcp_servers", "hive"): {"command": "hive", "args": ["mcp"], "env": {"A": "b"}}}
    wired, removed = round_trip("toml", original, owned)
    assert documents.parse("toml", HERE, wired).get(("mcp_servers", "hive")) == owned["mcp_servers", "hive"]
    assert removed == original


def test_a_new_toml_table_in_the_middle_keeps_a_blank_line_before_the_next_one() -> None:
    wired, _ = round_trip(
        "toml",
        '[mcp_servers.notes]\ncommand = "n"\n\n[projects."/src"]\ntrust_level = "trusted"\n',
        {("mcp_servers", "hive"): {"command": "hive", "args": ["mcp"]}},
    )
    assert wired == (
        '[mcp_servers.notes]\ncommand = "n"\n\n[mcp_servers.hive]\ncommand = "hive"\nargs = ["mcp"]\n\n'
        '[projects."/src"]\ntrust_level = "trusted"\n'
    )


def test_json_keeps_compact_arrays_and_the_persons_spacing_where_hive_did_not_touch() -> None:
    original = (
        '{\n   "permissions": {"allow": ["Bash(git status)", "Read"], "deny": []},\n'
        '   "env":   { "A": "1" },\n'
        '   "hooks": {\n      "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]\n'
        "   }\n}\n"
    )
    wired, removed = round_trip("json", original, {**MCP, **HOOKS})

    assert wired.startswith(
        '{\n   "permissions": {"allow": ["Bash(git status)", "Read"], "deny": []},\n   "env":   { "A": "1" },\n'
    )
    # The person's compact hook array stays on its line; hive's entry joins it there, compact too.
    stop = wired.split('"Stop": ', 1)[1].split("\n", 1)[0]
    assert stop.startswith('[{"hooks": [{"type": "command", "command": "notify-send done"}]}, {"hooks": [')
    # New content takes the file's three-space indentation.
    assert '\n   "mcpServers": {\n      "hive": {\n         "type": "stdio",\n' in wired
    assert json.loads(wired)["hooks"]["Stop"][1] == HOOKS["hooks", "Stop"][0]
    assert removed == original


def test_json_on_one_line_stays_on_one_line() -> None:
    wired, removed = round_trip("json", '{"theme": "dark", "mcpServers": {}}', MCP)
    assert "\n" not in wired and json.loads(wired)["mcpServers"]["hive"] == MCP["mcpServers", "hive"]
    assert removed == '{"theme": "dark", "mcpServers": {}}'


def test_a_new_json_file_is_written_with_two_space_indentation() -> None:
    wired, removed = round_trip("json", "", MCP)
    assert wired == json.dumps({"mcpServers": {"hive": MCP["mcpServers", "hive"]}}, indent=2) + "\n"
    assert removed.strip() == "{}"


_scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.text('aé"\\ \n', max_size=4)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("abc", max_size=3), inner, max_size=3),
    max_leaves=8,
)
_handlers = st.lists(
    st.fixed_dictionaries(
        {
            "hooks": st.lists(
                st.fixed_dictionaries(
                    {"type": st.just("command"), "command": st.sampled_from(["notify-send done", "guard.sh", HOOK])}
                ),
                min_size=1,
                max_size=2,
            )
        }
    ),
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(
    base=st.dictionaries(st.text("xyz", max_size=3), _values, max_size=4),
    servers=st.dictionaries(st.sampled_from(["notes", "hive"]), _values, max_size=2),
    stop=_handlers,
    indent=st.sampled_from([None, 1, 2, 3, "\t"]),
)
def test_json_edits_give_the_merged_content_and_come_back_byte_for_byte(
    base: dict[str, Any], servers: dict[str, Any], stop: list[Any], indent: int | str | None
) -> None:
    original = json.dumps({**base, "mcpServers": servers, "hooks": {"Stop": stop}}, indent=indent)
    wired, removed = round_trip("json", original, {**MCP, **HOOKS})
    expected = json.loads(original)
    expected["mcpServers"]["hive"] = MCP["mcpServers", "hive"]
    expected["hooks"]["Stop"] = ownership.merge_list(stop, HOOKS["hooks", "Stop"])
    assert json.loads(wired) == expected
    assert ("\n" in wired) is (indent is not None)  # a one-line file stays on one line
    if HOOK not in original and "hive" not in servers:
        assert removed == original  # nothing of hive's was there before: removal gives back every byte
