"""Agent Skills shipped with hive (each folder holds a SKILL.md)."""

from pathlib import Path

ROOT = Path(__file__).parent
