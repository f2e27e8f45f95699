"""How well and how fast outbound screening finds secrets: detection and false-hit rates on the corpora, and
:func:`hive.sidecar.screening.outbound.find_secrets` time for a 2 KB message and for 1 MB, next to a same-run
baseline (``str.splitlines`` and one regex for a few token prefixes over the same text).

    .venv/bin/python tests/bench/bench_outbound.py             # the table
    .venv/bin/python tests/bench/bench_outbound.py --quick     # fewer timing rounds
    .venv/bin/python tests/bench/bench_outbound.py --misses    # also each missed secret and each false hit

The corpora are ``tests/screening/corpus/outbound_secrets.yaml`` (messages that each carry one secret, written
as ``{{kind}}`` where :func:`fake_secret` puts a made-up value of that shape from a fixed seed, so the
repository holds no credential-shaped string) and ``outbound_benign.yaml`` (messages teammates send: diffs,
tracebacks, logs, configs without secrets, lockfiles, hashes, docs with placeholders).

A secret counts as found when a reported span overlaps the fake; a benign message counts as a false hit when
anything is reported in it. The 1 MB text is the benign corpus repeated, with one secret message every 64 KB.

Measured on the 2-core dev machine, itself busy with other test runs (load average 2.8), 2026-12-05,
66 secret messages and 210 benign (the corpora were written while the plugins were tuned: read them as a
regression floor; 25 benign and 15 secret messages written afterwards gave 0 false hits and 14 found):

    detection 100.0%  (kind right 100.0%)   false hits 0.0%
    first call (imports detect-secrets, builds plugins) 200 ms
                                p50 ms    p99 ms
    2KB find_secrets              0.75      5.47
    2KB baseline                  0.02      0.05
    1MB find_secrets            334.97    568.22
    1MB baseline                 12.78     25.58

The 1 MB text is dense with secret-sounding words (about 11,000 "token", "password", "auth"… windows), so the
context pass dominates; a 1 MB text without them costs about the token pass alone.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import re
import string
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hive.sidecar.screening.outbound import find_secrets

CORPUS = Path(__file__).resolve().parent.parent / "screening" / "corpus"
SEED = 23
MARKER = re.compile(r"\{\{([a-z0-9-]+)\}\}")
ALNUM = string.ascii_letters + string.digits
B64URL = ALNUM + "-_"
B64 = ALNUM + "+/"


def _pick(rng: random.Random, chars: str, n: int) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _jwt(rng: random.Random) -> str:
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = {"sub": str(rng.randrange(10**6)), "name": "Ada", "iat": 1_760_000_000 + rng.randrange(10**6)}
    return f"{header}.{_b64url(json.dumps(claims).encode())}.{_b64url(rng.randbytes(32))}"


def _pem(rng: random.Random, label: str) -> str:
    body = base64.b64encode(rng.randbytes(rng.choice([399, 1190]))).decode("ascii")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----"])


# kind in the corpus -> (kinds find_secrets may call it, maker). A fake has the shape only: random characters.
FAKES: dict[str, tuple[frozenset[str], Callable[[random.Random], str]]] = {
    "private-key": (frozenset({"private-key"}), lambda r: _pem(r, "OPENSSH PRIVATE KEY")),
    "rsa-private-key": (frozenset({"private-key"}), lambda r: _pem(r, "RSA PRIVATE KEY")),
    "pkcs8-private-key": (frozenset({"private-key"}), lambda r: _pem(r, "PRIVATE KEY")),
    "ec-private-key": (frozenset({"private-key"}), lambda r: _pem(r, "EC PRIVATE KEY")),
    "aws-access-key": (
        frozenset({"aws-access-key"}),
        lambda r: "AKIA" + _pick(r, string.ascii_uppercase + "234567", 16),
    ),
    "aws-secret-key": (frozenset({"aws-access-key", "secret-assignment", "high-entropy"}), lambda r: _pick(r, B64, 40)),
    "github-token": (frozenset({"github-token"}), lambda r: r.choice(["ghp_", "gho_", "ghs_"]) + _pick(r, ALNUM, 36)),
    "github-pat": (frozenset({"github-token"}), lambda r: f"github_pat_{_pick(r, ALNUM, 22)}_{_pick(r, ALNUM, 59)}"),
    "gitlab-token": (frozenset({"gitlab-token"}), lambda r: "glpat-" + _pick(r, B64URL, 20)),
    "slack-token": (
        frozenset({"slack-token"}),
        lambda r: (
            f"xoxb-{_pick(r, string.digits, 11)}-{_pick(r, string.digits, 13)}-"
            + _pick(r, string.ascii_lowercase + string.digits, 24)
        ),
    ),
    "slack-webhook": (
        frozenset({"slack-token"}),
        lambda r: (
            f"https://hooks.slack.com/services/T{_pick(r, string.ascii_uppercase + string.digits, 10)}"
            f"/B{_pick(r, string.ascii_uppercase + string.digits, 10)}/{_pick(r, ALNUM, 24)}"
        ),
    ),
    "stripe-key": (frozenset({"stripe-key"}), lambda r: r.choice(["sk_live_", "rk_live_"]) + _pick(r, ALNUM, 99)),
    "anthropic-key": (frozenset({"anthropic-key"}), lambda r: "sk-ant-api03-" + _pick(r, B64URL, 93) + "AA"),
    "openai-key": (frozenset({"openai-key"}), lambda r: "sk-proj-" + _pick(r, B64URL, 156)),
    "openai-legacy-key": (
        frozenset({"openai-key"}),
        lambda r: f"sk-{_pick(r, ALNUM, 20)}T3BlbkFJ{_pick(r, ALNUM, 20)}",
    ),
    "google-api-key": (frozenset({"google-api-key"}), lambda r: "AIza" + _pick(r, B64URL, 35)),
    "jwt": (frozenset({"jwt"}), _jwt),
    "password": (
        frozenset({"secret-assignment", "high-entropy", "url-credentials"}),
        lambda r: _pick(r, ALNUM, 12) + r.choice("!@%^*-_") + _pick(r, ALNUM, 3),
    ),
    "hex-secret": (frozenset({"secret-assignment", "high-entropy"}), lambda r: _pick(r, "0123456789abcdef", 64)),
    "opaque-token": (frozenset({"auth-header", "high-entropy", "secret-assignment"}), lambda r: _pick(r, B64URL, 40)),
    "npm-token": (frozenset({"npm-token"}), lambda r: "npm_" + _pick(r, ALNUM, 36)),
    "sendgrid-key": (frozenset({"sendgrid-key"}), lambda r: f"SG.{_pick(r, B64URL, 22)}.{_pick(r, B64URL, 43)}"),
}


def fake_secret(kind: str, rng: random.Random) -> str:
    """A made-up value with the shape of a ``kind`` credential; never a real one."""
    return FAKES[kind][1](rng)


@dataclass(frozen=True)
class Carrier:
    """A message from the secrets corpus with its fake filled in."""

    kind: str
    text: str
    start: int
    end: int


def fill(template: str, rng: random.Random) -> tuple[str, str, int, int]:
    """The template with its one ``{{kind}}`` replaced by a fake: (kind, text, fake's start, end)."""
    match = MARKER.search(template)
    assert match, template
    value = fake_secret(match.group(1), rng)
    text = template[: match.start()] + value + template[match.end() :]
    return match.group(1), text, match.start(), match.start() + len(value)


def load_secrets(seed: int = SEED) -> list[Carrier]:
    rng = random.Random(seed)
    data = yaml.safe_load((CORPUS / "outbound_secrets.yaml").read_text(encoding="utf-8"))
    return [Carrier(*fill(template, rng)) for template in data["messages"]]


def load_benign() -> list[str]:
    data = yaml.safe_load((CORPUS / "outbound_benign.yaml").read_text(encoding="utf-8"))
    return list(data["messages"])


def rates(secrets: list[Carrier], benign: list[str]) -> dict[str, Any]:
    """Detection rate, right-kind rate and false-hit rate, with what was missed and what was hit."""
    missed: list[str] = []
    wrong_kind: list[str] = []
    for carrier in secrets:
        hits = [s for s in find_secrets(carrier.text) if s.start < carrier.end and s.end > carrier.start]
        if not hits:
            missed.append(f"{carrier.kind}: {carrier.text[: carrier.start][-60:]!r}")
        elif not any(s.kind in FAKES[carrier.kind][0] for s in hits):
            wrong_kind.append(f"{carrier.kind} as {[s.kind for s in hits]}")
    false_hits = []
    for text in benign:
        found = find_secrets(text)
        if found:
            first = found[0]
            line = text.splitlines()[first.line - 1]
            false_hits.append(f"{first.kind} {first.masked} in {line[:100]!r}")
    return {
        "secrets": len(secrets),
        "benign": len(benign),
        "detection": 1 - len(missed) / len(secrets),
        "kind_right": 1 - (len(missed) + len(wrong_kind)) / len(secrets),
        "false_hits": len(false_hits) / len(benign),
        "missed": missed,
        "wrong_kind": wrong_kind,
        "false_hit_lines": false_hits,
    }


_BASELINE = re.compile(
    r"AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{36}|sk-[A-Za-z0-9_-]{20,}|-----BEGIN [A-Z ]*PRIVATE KEY"
)


def baseline(text: str) -> int:
    return sum(1 for line in text.splitlines() if _BASELINE.search(line))


def timings(fn: Callable[[str], object], text: str, rounds: int) -> tuple[float, float]:
    """p50 and p99 of ``fn(text)`` in milliseconds."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn(text)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, round(len(times) * 0.99))]


def big_text(secrets: list[Carrier], benign: list[str], size: int) -> str:
    parts: list[str] = []
    total = since_secret = 0
    i = 0
    while total < size:
        piece = benign[i % len(benign)] if since_secret < 64 * 1024 else secrets[i % len(secrets)].text
        since_secret = 0 if since_secret >= 64 * 1024 else since_secret + len(piece)
        parts.append(piece)
        total += len(piece) + 1
        i += 1
    return "\n".join(parts)[:size]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer timing rounds")
    parser.add_argument("--misses", action="store_true", help="list each missed secret and each false hit")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    secrets, benign = load_secrets(), load_benign()
    t0 = time.perf_counter()
    find_secrets("warm-up: loads detect-secrets")
    load_ms = (time.perf_counter() - t0) * 1000
    result = rates(secrets, benign)
    small = big_text(secrets, benign, 2 * 1024)
    large = big_text(secrets, benign, 1024 * 1024)
    rounds_small, rounds_large = (50, 3) if args.quick else (500, 21)
    result["first_call_ms"] = load_ms
    result["2KB"] = {
        "find_secrets": timings(find_secrets, small, rounds_small),
        "baseline": timings(baseline, small, rounds_small),
    }
    result["1MB"] = {
        "find_secrets": timings(find_secrets, large, rounds_large),
        "baseline": timings(baseline, large, rounds_large),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"outbound screening: {result['secrets']} secret messages, {result['benign']} benign ({CORPUS})")
    print(
        f"detection {result['detection']:.1%}  (kind right {result['kind_right']:.1%})   "
        f"false hits {result['false_hits']:.1%}"
    )
    print(f"first call (imports detect-secrets, builds plugins) {load_ms:.0f} ms")
    print(f"{'':24}{'p50 ms':>10}{'p99 ms':>10}")
    for size in ("2KB", "1MB"):
        for name, (p50, p99) in result[size].items():
            print(f"{size + ' ' + name:24}{p50:10.2f}{p99:10.2f}")
    if args.misses:
        for key in ("missed", "wrong_kind", "false_hit_lines"):
            print(f"\n{key}:\n  " + "\n  ".join(result[key]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
