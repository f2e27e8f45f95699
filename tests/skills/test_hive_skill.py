"""The bundled ``hive`` skill is a valid Agent Skill, and its behaviour rules are what ``hive mcp`` serves."""

from __future__ import annotations

import re
from typing import Any

import yaml

from hive import skills
from hive.sidecar.mcp.server import behaviour_rules

SKILL = skills.ROOT / "hive" / "SKILL.md"
# The fields the Agent Skills spec allows; the reference validator rejects any other.
ALLOWED = {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}


def frontmatter() -> dict[str, Any]:
    text = SKILL.read_text(encoding="utf-8")
    assert text.startswith("---\n"), "SKILL.md must start with YAML frontmatter"
    block = text.split("---\n", 2)[1]
    data = yaml.safe_load(block)
    assert isinstance(data, dict)
    return data


def test_the_hive_skill_frontmatter_follows_the_agent_skills_rules() -> None:
    data = frontmatter()

    assert set(data) <= ALLOWED
    assert data["name"] == SKILL.parent.name == "hive"
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", data["name"])
    assert isinstance(data["description"], str) and 0 < len(data["description"]) <= 1024
    assert len(SKILL.read_text(encoding="utf-8").splitlines()) < 500


def test_the_behaviour_rules_are_the_skills_how_to_behave_section_and_nothing_else() -> None:
    rules = behaviour_rules()

    assert rules.startswith("- Message only when you need something")
    assert "<hive-message" in rules and "<hive-approval" in rules
    assert "## " not in rules
    assert rules in SKILL.read_text(encoding="utf-8")
