"""Redaction: secrets in what a hook reports are replaced by ``[REDACTED]`` before anything is stored.

:func:`redact` finds secrets in text (provider tokens, private keys, authorization headers,
credentials in URLs, values named like secrets in assignments, options and config commands,
password options of the programs that take one); :func:`clean` redacts and then caps a string,
redaction before the cap so a cut never leaves half a secret behind; :func:`scrub` and
:func:`detail_json` do the same for JSON values, redacting whole what sits under a secret-looking key.
"""

from __future__ import annotations

import json
import re
from typing import Any

STRING_CAP = 4096  # bytes of one stored string, after redaction
DETAIL_CAP = 2048
REDACTED = "[REDACTED]"

# Provider token prefixes: the prefix is kept so a reader still sees what kind of secret was there.
_PREFIXES = (
    "github_pat_",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "glpat-",
    "sk-ant-",
    "sk-proj-",
    "sk-",
    "xoxb-",
    "xoxp-",
    "xoxa-",
    "xoxr-",
    "AKIA",
    "ASIA",
    "AIza",
    "npm_",
    "hf_",
    "pypi-",
)
_TOKEN = re.compile("(" + "|".join(re.escape(p) for p in _PREFIXES) + r")[A-Za-z0-9_\-]{8,}")
_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S)
_AUTH = re.compile(
    r"(?i)\b((?:proxy-)?authorization\s*[:=]\s*|cookie\s*:\s*)"
    r"(?!(?:(?:bearer|basic|token|digest|negotiate)\s+)?\[REDACTED\])"
    r"(?:(bearer|basic|token|digest|negotiate)\s+)?[^\s\"',;]+"
)
_URL_CREDS = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/@:]+:[^\s/@]+@")
# A shell word as a value: quoted (kept quoted) or bare.
_VALUE = r"(?:\"(?:[^\"\\]|\\.)*\"|'[^']*'|(?![\-\[])[^\s\"'`;&|()<>]+)"
# Names of secrets. Strong words count anywhere in a name (GH_TOKEN, mysecret, clientSecret);
# weak ones only as a whole part of it (DB_PASS, BASIC_AUTH, STRIPE_KEY, but not bypass or PWD).
_STRONG = r"(?:secret|token|passw(?:or)?d|passphrase|credentials?|api[_\-]?key|private[_\-]?key|access[_\-]?key)s?"
_WEAK = {"pass", "pwd", "auth", "key", "cookie", "pw", "pin"}
_NOT_SECRET = {"pwd", "oldpwd", "key", "pass", "auth", "pin"}  # a name alone: the shell's folder, a word
# A last part saying the value is where a secret is, or about it, not the secret (--password-stdin).
_ABOUT = {
    "stdin",
    "file",
    "path",
    "dir",
    "env",
    "prompt",
    "url",
    "uri",
    "endpoint",
    "host",
    "port",
    "user",
    "username",
    "name",
    "type",
    "length",
    "len",
    "policy",
    "reset",
    "expiry",
    "expires",
    "ttl",
    "id",
    "count",
}
_STRONG_RE = re.compile(f"(?i){_STRONG}(?![a-z])")
_PARTS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_NAME = r"[^\W\d][\w.\-]*"  # any letters: a look-alike that case folding reads as ASCII (ſ) counts
# NAME=value, NAME: value, "name": "value" (JSON, YAML, env files, headers).
_LABELLED = re.compile(
    r"(?<![\w\-])(" + _NAME + r")(\"?'?\s*[:=]\s*\"?'?)((?<=\")(?:[^\"\\]|\\.)*(?=\")"
    r"|(?<=')[^']*(?=')|[^\s\"',;&]+)"
)
# --password=x, --password x, -password x, --db-token "x y".
_OPTION = re.compile(r"(?<![\w\-])(--?" + _NAME + r")(=|\s+)(" + _VALUE + ")")
# `aws configure set aws_secret_access_key V`, `npm config set authToken V`, `gh secret set N --body V`.
_SET = re.compile(r"(?i)\b((?:set|config:set|secret\s+set\s+\S+)\s+)(--body|-b|[^\s=\"']+)(\s+)(" + _VALUE + ")")
# Programs whose short options take a password: -pPW for mysql (a separate word is a database
# there), -p PW for sshpass and registry logins, -a PW for redis-cli, -P PW for zip.
_SHORT = {
    "mysql": ("p", False),
    "mysqldump": ("p", False),
    "mysqladmin": ("p", False),
    "mysqlimport": ("p", False),
    "mysqlshow": ("p", False),
    "mysqlcheck": ("p", False),
    "mysqlpump": ("p", False),
    "mysqlsh": ("p", False),
    "mariadb": ("p", False),
    "mariadb-dump": ("p", False),
    "mariadb-admin": ("p", False),
    "7z": ("p", False),
    "7za": ("p", False),
    "sshpass": ("p", True),
    "redis-cli": ("a", True),
    "mongo": ("p", True),
    "mongosh": ("p", True),
    "mongodump": ("p", True),
    "mongorestore": ("p", True),
    "zip": ("P", True),
    "unzip": ("P", True),
    "docker login": ("p", True),
    "podman login": ("p", True),
    "buildah login": ("p", True),
    "skopeo login": ("p", True),
    "helm registry login": ("p", True),
    "oras login": ("p", True),
}
_PROGRAM = re.compile(
    r"(?<![\w./\-])(?:[\w./\-]*/)?("
    + "|".join(re.escape(p) for p in sorted(_SHORT, key=len, reverse=True))
    + r")(?![\w\-])([^|;&\n]*)"
)
_USER_PASS = re.compile(
    r"(?<![\w\-])((?:-u|--user|--proxy-user)(?:=|\s+)[\"']?[^\s:\"']+:)(?!\[REDACTED\])"
    r"([^\s\"']+)"
)
_OPENSSL_PASS = re.compile(r"\bpass:(" + _VALUE + ")")


def _secret_name(name: str) -> bool:
    """Whether ``name`` names a secret (see _STRONG and _WEAK)."""
    parts = _PARTS.findall(name)
    if name.casefold() in _NOT_SECRET or not parts or parts[-1].casefold() in _ABOUT:
        return False
    if _STRONG_RE.search(name):
        return True
    return any(part.casefold() in _WEAK for part in parts)


def _hidden(value: str) -> str:
    """``value`` redacted, its quotes and any provider prefix kept."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[0] + _keep_prefix(value[1:-1]) + value[0]
    return _keep_prefix(value)


def _named(match: re.Match[str], name: int, value: int) -> str:
    if not _secret_name(match.group(name).lstrip("-")) or match.group(value).startswith(REDACTED):
        return match.group(0)
    start, end = match.span(value)
    base = match.start()
    return match.group(0)[: start - base] + _hidden(match.group(value)) + match.group(0)[end - base :]


def _short_option(match: re.Match[str]) -> str:
    letter, separate = _SHORT[match.group(1)]
    rule = rf"(?<!\S)(-{letter})" + (r"(\s*)" if separate else "()") + "(" + _VALUE + ")"
    rest = re.sub(
        rule,
        lambda m: m.group(1) + m.group(2) + _hidden(m.group(3)) if m.group(3) != REDACTED else m.group(0),
        match.group(2),
    )
    # The rest of the line may run another such program (`mysql -pX; ...` has no separator in
    # `mysql -pX sshpass -p Y`): its options follow its own rule.
    rest = _PROGRAM.sub(_short_option, rest)
    return match.group(0)[: match.start(2) - match.start()] + rest


def _keep_prefix(value: str) -> str:
    if value.startswith(REDACTED):
        return value
    for prefix in _PREFIXES:
        if value.startswith(prefix):
            return prefix + REDACTED
    return REDACTED


# One cheap pass that every rule below needs to match first: most strings skip the rules.
# Plain words searched in the case-folded text: a case-insensitive alternation costs ~0.6 µs per
# character, this about 0.03 (casefold, unlike lower, also maps the look-alikes that re's
# IGNORECASE matches, such as "ſ" for "s").
_WORDS = (
    "private_key",
    "private-key",
    "private key",
    "privatekey",
    "authorization",
    "://",
    "secret",
    "token",
    "passw",
    "api_key",
    "api-key",
    "apikey",
    "access_key",
    "access-key",
    "accesskey",
    "credential",
    "pass",
    "pwd",
    "auth",
    "key",
    "cookie",
    "pw",
    "pin",
    *_SHORT,
    "-u",
    "--user",
    "--proxy-user",
    *(p.casefold() for p in _PREFIXES),
)
_MAYBE = re.compile("|".join(re.escape(w) for w in sorted(set(_WORDS), key=len, reverse=True)))


def redact(text: str) -> str:
    """Secrets in ``text`` replaced by ``[REDACTED]`` (provider prefixes kept: ``ghp_[REDACTED]``).

    Redacting what is already redacted changes nothing, so a value may safely pass twice."""
    if not text or not _MAYBE.search(text.casefold()):
        return text
    text = _PEM.sub(lambda m: f"-----BEGIN {m.group(1)}PRIVATE KEY-----{REDACTED}", text)
    text = _AUTH.sub(lambda m: m.group(1) + (m.group(2) + " " if m.group(2) else "") + REDACTED, text)
    text = _URL_CREDS.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _LABELLED.sub(lambda m: _named(m, 1, 3), text)
    text = _OPTION.sub(lambda m: _named(m, 1, 3), text)
    text = _SET.sub(
        lambda m: (
            _named(m, 2, 4)
            if m.group(2) not in ("--body", "-b")
            else m.group(1) + m.group(2) + m.group(3) + _hidden(m.group(4))
        ),
        text,
    )
    text = _PROGRAM.sub(_short_option, text)
    text = _USER_PASS.sub(lambda m: m.group(1) + _hidden(m.group(2)), text)
    text = _OPENSSL_PASS.sub(lambda m: "pass:" + _hidden(m.group(1)), text)
    return _TOKEN.sub(lambda m: m.group(1) + REDACTED, text)


# What is read past the cut: longer than any secret the rules match whole, so one that starts
# before the cut is redacted whole (a private key block with no end is redacted to the end).
_CUT_MARGIN = 4096


def clean(text: str, cap: int = STRING_CAP) -> str:
    """Redacted, then cut to ``cap`` bytes (never the other way round)."""
    text = redact(text[: cap + _CUT_MARGIN])  # the rest is cut anyway: never redact a megabyte for 4 KB
    if len(text) * 4 <= cap:  # no character takes more than 4 bytes: short enough without encoding
        return text
    data = text.encode("utf-8")
    if len(data) <= cap:
        return text
    return data[:cap].decode("utf-8", "ignore") + "…"


def scrub(value: Any, key: str = "") -> Any:
    """A JSON value with every string cleaned, and values under secret-looking keys redacted whole."""
    if key and _secret_name(key) and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return _keep_prefix(str(value))
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {str(k)[:200]: scrub(v, str(k)) for k, v in list(value.items())[:100]}
    if isinstance(value, list):
        return [scrub(v) for v in value[:100]]
    return value


def _shortened(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "…"
    if isinstance(value, dict):
        return {k: _shortened(v, limit) for k, v in list(value.items())[:limit]}
    if isinstance(value, list):
        return [_shortened(v, limit) for v in value[:limit]]
    return value


def detail_json(value: Any, cap: int = DETAIL_CAP) -> str:
    """``value`` scrubbed and written as JSON of at most ``cap`` bytes: always valid JSON, since the
    strings are cut before writing (never the text after), and redacted before they are cut."""
    value = scrub(value)
    text = json.dumps(value, ensure_ascii=False)
    for limit in (512, 128, 32, 8):
        if len(text.encode("utf-8")) <= cap:
            return text
        text = json.dumps(_shortened(value, limit), ensure_ascii=False)
    return text if len(text.encode("utf-8")) <= cap else '{"cut": true}'
