"""Facts about one harness live in ``integrations/<harness>/``, read through its descriptor.

The rest of hive (the sidecar, the installer) names no harness in its code: a string literal that
is a harness's name, its folder (``.claude``) or its marker (``CLAUDECODE``) outside docstrings
and comments is a fact held in the wrong place: data goes into the harness's descriptor
(``integrations/descriptor.py``), behaviour into a hook its plugin implements
(``integrations/hookspecs.py``).
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


def test_no_harness_fact_is_held_outside_the_integrations() -> None:
    holding = {}
    for name, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            found = _literals(path)
            if found:
                holding[f"{name}/{path.relative_to(root)}"] = found
    assert not holding, f"harness facts outside integrations/<harness>/ (read them from the descriptor): {holding}"


def test_the_check_finds_a_harness_name_in_code_but_not_in_a_docstring(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""Works with claude."""\n\nHOME = ".codex"\nNAME = "claude-code"\nOTHER = "pipeline"\n')
    assert [value for _, value in _literals(sample)] == [".codex", "claude-code"]
