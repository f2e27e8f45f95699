"""How well and how fast the inbound screen holds what it should: the hold rate on the hostile
corpus, the false-hold rate on the benign one, each family's hold rate, and the time
:func:`hive.sidecar.screening.inbound.screen` takes on typical messages next to
:func:`hive.sidecar.base.defang.defang` of the same text in the same run.

    .venv/bin/python tests/bench/bench_screening.py            # the table
    .venv/bin/python tests/bench/bench_screening.py --json     # the figures

The corpora are ``tests/screening/corpus/hostile.yaml`` (each message tagged with its family and
how it is dressed) and ``benign.yaml`` (what teammates' agents send each other). "Held" means
screen() returned at least one finding; "by its family" means one of them came from a rule of
the family the message is tagged with. Typical messages are ~2 KB: benign corpus entries joined
in order until they reach 2,048 characters, one starting at each entry.

Measured on the 2-core dev machine (Python 3.11, 2026-12-05, load average ~2.4 from other test
runs sharing it; three runs):

    hostile 250 messages: held 100.0%, by its family 100.0%
      command-coercion      56  held 100.0%  by its family 100.0%
      hidden-text           50  held 100.0%  by its family 100.0%
      hive-frame            20  held 100.0%  by its family 100.0%
      prompt-injection      70  held 100.0%  by its family 100.0%
      secret-exfiltration   54  held 100.0%  by its family 100.0%
    benign 712 messages: false holds 0.14%
      held: "Please don't tell the user about the surprise party in the standup notes 😄"
    screen() on 712 messages of 2 KB: p50 0.88-0.97 ms, p99 2.3-2.5 ms  (defang: p50 0.07-0.09 ms, p99 0.6-0.7 ms)

A 1 MB body takes 0.2-2.3 s (a benign traceback log ~0.5 s; worst seen, 1 MB of "send the your
all " repeated, whose every word opens some rule, 2.3 s): linear in the size, never exponential.

Both corpora were written by the author of the rules, and the rules were tuned on them (misses
were fixed by widening a rule, not by adding the missed text); a held-out corpus would judge the
rules better than these figures do. The p99 is set by messages with much non-ASCII text, whose
compatibility folding is read character by character.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from hive.sidecar.base.defang import defang
from hive.sidecar.screening.inbound import screen

CORPUS = Path(__file__).resolve().parent.parent / "screening" / "corpus"
TYPICAL = 2048


def load(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((CORPUS / name).read_text(encoding="utf-8"))


def rates(hostile: list[dict[str, Any]], benign: list[dict[str, Any]]) -> dict[str, Any]:
    total, held, own = Counter[str](), Counter[str](), Counter[str]()
    for item in hostile:
        found = {f.rule for f in screen(item["text"])}
        total[item["family"]] += 1
        held[item["family"]] += bool(found)
        own[item["family"]] += any(rule.startswith(item["family"] + "/") for rule in found)
    false = [item["text"] for item in benign if screen(item["text"])]
    return {
        "hostile": len(hostile),
        "hold_rate": sum(held.values()) / len(hostile),
        "own_family_rate": sum(own.values()) / len(hostile),
        "families": {
            family: {
                "count": total[family],
                "hold_rate": held[family] / total[family],
                "own": own[family] / total[family],
            }
            for family in sorted(total)
        },
        "benign": len(benign),
        "false_hold_rate": len(false) / len(benign),
        "false_holds": [text[:100] for text in false],
    }


def typical(benign: list[dict[str, Any]]) -> list[str]:
    texts = [item["text"] for item in benign]
    out = []
    for first in range(len(texts)):
        message, i = "", first
        while len(message) < TYPICAL:
            message += texts[i % len(texts)] + "\n\n"
            i += 1
        out.append(message[:TYPICAL])
    return out


def timings(messages: list[str]) -> dict[str, dict[str, float]]:
    screen("warm the rule cache")
    defang("warm the table")
    figures = {}
    for name, run in (("screen", screen), ("defang", defang)):
        took = []
        for message in messages:
            start = time.perf_counter()
            run(message)
            took.append(time.perf_counter() - start)
        took.sort()
        figures[name] = {"p50_ms": took[len(took) // 2] * 1e3, "p99_ms": took[int(len(took) * 0.99)] * 1e3}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    hostile, benign = load("hostile.yaml"), load("benign.yaml")
    figures = rates(hostile, benign)
    messages = typical(benign)
    figures["timings"] = timings(messages)
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    held, own = figures["hold_rate"], figures["own_family_rate"]
    print(f"hostile {figures['hostile']} messages: held {held:.1%}, by its family {own:.1%}")
    for family, row in figures["families"].items():
        print(f"  {family:20} {row['count']:3}  held {row['hold_rate']:6.1%}  by its family {row['own']:6.1%}")
    print(f"benign {figures['benign']} messages: false holds {figures['false_hold_rate']:.2%}")
    for text in figures["false_holds"]:
        print(f"  held: {text!r}")
    times = figures["timings"]
    print(
        f"screen() on {len(messages)} messages of {TYPICAL // 1024} KB: p50 {times['screen']['p50_ms']:.2f} ms, "
        f"p99 {times['screen']['p99_ms']:.2f} ms  (defang: p50 {times['defang']['p50_ms']:.2f} ms, "
        f"p99 {times['defang']['p99_ms']:.2f} ms)"
    )


if __name__ == "__main__":
    main()
