"""CODEOWNERS: found where GitHub looks, patterns read gitignore-style, the last match wins, owners mapped to people."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hive.sidecar.team import codeowners
from hive.sidecar.team.codeowners import aliases_from_config, owners_of, parse, person_for, rule_for

GITHUB_EXAMPLE = """\
# The example from GitHub's documentation, trimmed.
*       @global-owner1 @global-owner2
*.js    @js-owner #This is an inline comment.
*.go docs@example.com
*.txt @octo-org/octocats
/build/logs/ @doctocat
docs/*  docs@example.com
apps/ @octocat
/docs/ @doctocat
/scripts/ @doctocat @octocat
**/logs @octocat
/apps/ @octocat
/apps/github
/space\\ dir/ @spacey
"""


def write(root: Path, where: str, text: str) -> Path:
    path = root / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def owner(rules: list[codeowners.Rule], path: str) -> tuple[str, ...] | None:
    rule = rule_for(rules, path)
    return None if rule is None else rule.owners


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("README.md", ("@global-owner1", "@global-owner2")),
        ("src/index.js", ("@js-owner",)),  # the inline comment is not an owner
        ("cmd/main.go", ("docs@example.com",)),
        ("notes/a.txt", ("@octo-org/octocats",)),
        ("build/logs/today/x.log", ("@octocat",)),  # **/logs later in the file wins over /build/logs/
        ("deep/down/logs/x.log", ("@octocat",)),
        ("docs/getting-started.md", ("@doctocat",)),  # /docs/ is later than docs/*
        ("scripts/a/b.sh", ("@doctocat", "@octocat")),
        ("lib/apps/x.py", ("@octocat",)),  # apps/ matches a folder at any depth
        ("apps/github/x.py", ()),  # a matching line without owners: nobody owns it
        ("apps/other/x.py", ("@octocat",)),
        ("space dir/f", ("@spacey",)),
    ],
)
def test_the_last_matching_line_decides_a_paths_owners(path: str, expected: tuple[str, ...]) -> None:
    assert owner(parse(GITHUB_EXAMPLE), path) == expected


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("docs/*", "docs/a.md", True),
        ("docs/*", "docs/build/a.md", False),  # a lone * matches one level only
        ("/docs/", "docs/build/a.md", True),
        ("/docs/", "src/docs/a.md", False),  # anchored at the root
        ("docs/", "src/docs/a.md", True),
        ("docs/", "docs", False),  # a trailing slash matches folders only
        ("docs", "src/docs", True),
        ("src/docs", "docs", False),
        ("a/**/b", "a/b", True),
        ("a/**/b", "a/x/y/b", True),
        ("a/**", "a/x/y", True),
        ("a/**", "b/a/x", False),
        ("**/x.py", "p/q/x.py", True),
        ("*.py", "p/q/x.py", True),
        ("?.py", "p/x.py", True),
        ("?.py", "p/xy.py", False),
        ("/x.py", "p/x.py", False),
        ("\\#notes", "#notes", True),
    ],
)
def test_patterns_follow_gitignore_rules_as_github_applies_them(pattern: str, path: str, hit: bool) -> None:
    rules = parse(f"{pattern} @o\n")
    assert (owner(rules, path) is not None) is hit


def test_lines_that_are_not_codeowners_rules_are_skipped_not_fatal() -> None:
    rules = parse("# comment\n\n!negated @a\n[Section] @b\n^[Optional]\n[ab].py @c\nsrc/ @d not-an-owner\n")
    assert [(r.pattern, r.owners) for r in rules] == [("src/", ("@d",))]


def test_the_file_is_taken_from_githubs_first_location_only(tmp_path: Path) -> None:
    assert owners_of(tmp_path, ["a.py"]) == []
    write(tmp_path, "docs/CODEOWNERS", "* @docs\n")
    assert owners_of(tmp_path, ["a.py"]) == ["@docs"]
    write(tmp_path, "CODEOWNERS", "* @root\n")
    assert owners_of(tmp_path, ["a.py"]) == ["@root"]
    write(tmp_path, ".github/CODEOWNERS", "*.md @github\n")
    assert owners_of(tmp_path, ["a.py"]) == []  # .github/ wins, and it has no rule for a.py
    assert owners_of(tmp_path, ["a.md"]) == ["@github"]


def test_owners_of_several_paths_are_listed_once_in_first_seen_order(tmp_path: Path) -> None:
    write(tmp_path, "CODEOWNERS", "* @all\nsrc/ @bob @carol\nsrc/auth/ @alice @bob\n")
    assert owners_of(tmp_path, ["src/auth/login.py", "src/x.py", "README"]) == ["@alice", "@bob", "@carol", "@all"]
    # absolute paths under the root count; paths outside it do not
    assert owners_of(tmp_path, [str(tmp_path / "src" / "x.py"), "/elsewhere/x.py", "../x.py"]) == ["@bob", "@carol"]


def test_an_edited_codeowners_is_read_again(tmp_path: Path) -> None:
    path = write(tmp_path, "CODEOWNERS", "* @before\n")
    assert owners_of(tmp_path, ["a"]) == ["@before"]
    path.write_text("* @after-the-edit\n", encoding="utf-8")
    os.utime(path, ns=(path.stat().st_mtime_ns + 10**9,) * 2)
    assert owners_of(tmp_path, ["a"]) == ["@after-the-edit"]


def test_owners_map_to_roster_persons_by_alias_handle_or_mail_and_the_rest_stay_as_written(tmp_path: Path) -> None:
    write(tmp_path, ".github/CODEOWNERS", "* @Alice bob@example.com @acme/web @Carol-GH @dave erin.smith@example.com\n")
    people = ["alice", "bob", "carol", "frank"]
    got = owners_of(tmp_path, ["x"], people=people, aliases={"@carol-gh": "carol"})
    assert got == ["alice", "bob", "@acme/web", "carol", "@dave", "erin.smith@example.com"]
    assert person_for("@acme/web", people, {"@acme/web": "frank"}) == "frank"  # a team maps only by alias
    assert person_for("@x", people, {"@x": "not-on-the-roster"}) is None


def test_aliases_are_read_from_the_codeowners_table_of_the_config(tmp_path: Path) -> None:
    config = write(tmp_path, "config.toml", 'person = "alice"\n[codeowners]\n"@Alice-GH" = "Alice"\n"@n" = 3\n')
    assert aliases_from_config(config) == {"@Alice-GH": "alice"}
    assert aliases_from_config(tmp_path / "missing.toml") == {}
    bad = write(tmp_path, "bad.toml", "not toml [\n")
    assert aliases_from_config(bad) == {}
