"""Benchmark of promotion: 100 verified lessons written as Agent Skills, next to a plain file write of the same bytes.

Run it from the repository root with the project's venv:

    .venv/bin/python tests/bench/bench_promote.py           # 100 skills
    .venv/bin/python tests/bench/bench_promote.py --quick   # 20 skills (smoke run)

It calls :func:`hive.sidecar.lessons.promote.write_skill` (render, digest, atomic 0644 write, the relative
``.claude/skills`` link) for each lesson into a fresh repository folder under /tmp, then rewrites each
once more (the supersession path: read, check the digest, re-render), and runs the Agent Skills
reference validator (``skills_ref.validate``) on every skill written. The baseline writes each rendered
text to a file with one ``open``/``write``. Nothing is asserted on the numbers.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from skills_ref import validate

from hive.sidecar.lessons.promote import SkillSource, render, skill_name, write_skill

WORDS = (
    "staging",
    "database",
    "vpn",
    "retry",
    "idempotency",
    "migration",
    "cache",
    "token",
    "refresh",
    "deploy",
    "fixture",
    "timezone",
    "queue",
    "worker",
    "schema",
    "lock",
    "build",
    "release",
    "flag",
    "payments",
)


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def lessons(count: int) -> list[SkillSource]:
    out = []
    for i in range(count):
        words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(5)]
        text = (
            f"Lesson {i}: when the {words[0]} {words[1]} fails, check the {words[2]} first; the {words[3]} "
            f"path needs the {words[4]} set. " * 3
        ).strip()
        out.append(
            SkillSource(
                id=f"{i:064x}",
                kind="gotcha",
                text=text,
                applicability=f"working on {words[0]}",
                scope="project",
                reviewer="bob",
                author="alice/api-claude",
                tags=(words[0], words[1]),
                project="sha256:" + "a" * 64,
                evidence=(f"file: src/{words[0]}.py",),
            )
        )
    return out


def timed(items: list[SkillSource], run: object) -> list[float]:
    samples = []
    for item in items:
        start = time.perf_counter()
        run(item)  # type: ignore[operator]
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 skills instead of 100")
    count = 20 if parser.parse_args().quick else 100
    root = Path(tempfile.mkdtemp(prefix="hive-bench-promote-", dir="/tmp"))
    plain = Path(tempfile.mkdtemp(prefix="hive-bench-plain-", dir="/tmp"))
    try:
        (root / ".git").mkdir()
        items = lessons(count)
        folders: dict[str, str] = {}

        def promote(item: SkillSource) -> None:
            folders[item.id] = write_skill(root, item).skill

        def again(item: SkillSource) -> None:
            write_skill(root, item, folder=folders[item.id])

        def baseline(item: SkillSource) -> None:
            name = skill_name(item) + item.id[-6:]
            with open(plain / name, "w", encoding="utf-8") as out:
                out.write(render(item, name))

        started = time.perf_counter()
        first = timed(items, promote)
        total = time.perf_counter() - started
        rewrite = timed(items, again)
        base = timed(items, baseline)
        checked = time.perf_counter()
        problems = sum(len(validate(root / ".agents" / "skills" / folders[i.id])) for i in items)
        validating = time.perf_counter() - checked
        p50, p99 = percentiles(first)
        r50, r99 = percentiles(rewrite)
        b50, b99 = percentiles(base)
        print(f"baseline: render + one plain file write   p50 {b50:7.3f} ms  p99 {b99:7.3f} ms")
        print(
            f"promote {count} skills (new)               p50 {p50:7.3f} ms  p99 {p99:7.3f} ms  "
            f"{p50 / b50:5.2f}x baseline; {total:.2f} s in all"
        )
        print(
            f"promote again (re-render, digest check)   p50 {r50:7.3f} ms  p99 {r99:7.3f} ms  "
            f"{r50 / b50:5.2f}x baseline"
        )
        print(f"reference validator on all {count}: {validating:.2f} s, {problems} problems")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(plain, ignore_errors=True)


if __name__ == "__main__":
    main()
