"""Facts about one harness live in ``integrations/<harness>/``, read through its descriptor.

The rest of hive (the sidecar, the installer) names no harness in its code: a string literal that
is a harness's name, its folder (``.claude``) or its marker (``CLAUDECODE``) outside docstrings
and comments is a fact held in the wrong place. The files that still hold some are listed in
:data:`STILL_HOLDING`, each to move into its descriptor; the list may only shrink.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import hive.installer
import hive.sidecar

PACKAGES = {"sidecar": Path(hive.sidecar.__file__).parent, "installer": Path(hive.installer.__file__).parent}
HARNESS_WORD = re.compile(
    r"(?i)^\.?(claude([-_ ]?code)?|codex|cursor|gemini|opencode|pi)(\.json)?$|"
    r"^(CLAUDECODE|OPENCODE|x-codex-[\w-]+|pi/\w+|codex-home)$"
)

STILL_HOLDING = {
    "sidecar/cli/lessons.py": "promote's --claude choice",
    "sidecar/lessons/promote.py": "Claude Code's project skills folder (.claude/skills)",
    "sidecar/mail/codex_push.py": "the Codex home and its app-server, which only Codex has",
    "sidecar/mcp/identity.py": "which environment variables and request fields name each harness's session",
    "installer/doctor.py": "each harness's own checks (Codex home, Gemini trust, Claude Code's files)",
    "installer/trust.py": "each harness's folder-trust rules",
}


def _literals(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and HARNESS_WORD.match(node.value.strip())
    ]


def test_harness_facts_outside_the_integrations_are_only_in_the_listed_files_and_the_list_only_shrinks() -> None:
    holding = {}
    for name, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            found = _literals(path)
            if found:
                holding[f"{name}/{path.relative_to(root)}"] = found
    new = {path: found for path, found in holding.items() if path not in STILL_HOLDING}
    assert not new, f"harness facts outside integrations/<harness>/ (read them from the descriptor): {new}"
    gone = sorted(set(STILL_HOLDING) - set(holding))
    assert not gone, f"these no longer hold harness facts: delete them from STILL_HOLDING: {gone}"


def test_the_check_finds_a_harness_name_in_code_but_not_in_a_docstring(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""Works with claude."""\n\nHOME = ".codex"\nNAME = "claude-code"\nOTHER = "pipeline"\n')
    assert [value for _, value in _literals(sample)] == [".codex", "claude-code"]
