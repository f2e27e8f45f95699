"""Secrets held before they leave: key material and credentials found in a message or attachment's text.

:func:`find_secrets` reads a text with detect-secrets' plugins (and ours for what they miss, in
:mod:`hive.sidecar.screening.secret_plugins`) and answers where each secret is, of what kind, and a masked
form that may be shown to the person. It never returns, logs or raises with a secret's value.

detect-secrets is used through its plugins and filters only, never ``scan_line``: ``scan_line`` rewrites the
process-wide settings on every call (not safe from two threads) and its plugins may verify a secret over the
network when the settings ask. Plugin instances here are built once and only read (their compiled regexes),
so :func:`find_secrets` may run from any thread.

Two passes keep a large text bounded. Token plugins (a fixed prefix or shape: ``AKIA…``, ``ghp_…``, a private
key header, a JWT) run once over the whole text. Context plugins (``password = "…"``, ``KEY=value`` lines,
quoted high-entropy strings beside a secret-sounding word) run only on windows around a secret-sounding word.
"""

from __future__ import annotations

import bisect
import functools
import logging
import re
import string
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Secret", "find_secrets"]


@dataclass(frozen=True)
class Secret:
    """One secret found in a text: its kind, where it is, and a form of it that may be shown."""

    kind: str
    """A short stable id: ``"private-key"``, ``"aws-access-key"``, ``"github-token"``, ``"secret-assignment"``…"""
    line: int
    """1-based line of the text where it starts."""
    start: int
    """Character offset of its first character in the whole text."""
    end: int
    """Character offset just past its last character."""
    masked: str
    """At most its first 4 characters (fewer for a short one), "…" and its length: ``"AKIA…(20)"``."""


# Token plugin class (detect-secrets' and ours) -> our kind.
_KINDS: dict[str, str] = {
    "AWSKeyDetector": "aws-access-key",
    "GitHubTokenDetector": "github-token",
    "GitLabTokenDetector": "gitlab-token",
    "SlackDetector": "slack-token",
    "StripeDetector": "stripe-key",
    "PrivateKeyDetector": "private-key",
    "JwtTokenDetector": "jwt",
    "OpenAIDetector": "openai-key",
    "BasicAuthDetector": "url-credentials",
    "NpmDetector": "npm-token",
    "PypiTokenDetector": "pypi-token",
    "SendGridDetector": "sendgrid-key",
    "TwilioKeyDetector": "twilio-key",
    "AzureStorageKeyDetector": "azure-storage-key",
    "SquareOAuthDetector": "square-secret",
    # ours (secret_plugins)
    "AnthropicKeyDetector": "anthropic-key",
    "OpenAIProjectKeyDetector": "openai-key",
    "GoogleApiKeyDetector": "google-api-key",
    "GoogleOAuthDetector": "google-oauth",
    "ArmouredPrivateKeyDetector": "private-key",
    "GitHubFineGrainedTokenDetector": "github-token",
    "StripeLongKeyDetector": "stripe-key",
    "NpmAccessTokenDetector": "npm-token",
}
# The library's token plugins whose secret is a part of their match (the value after ``aws_secret…=``, the
# password in ``://user:password@``): the group it is in.
_LIBRARY_VALUE_GROUP = {"AWSKeyDetector": 1, "BasicAuthDetector": 1, "NpmDetector": 1}
# Kinds read from context rather than shape; where one overlaps a shaped token, the token's kind is kept.
_GENERIC = frozenset({"secret-assignment", "high-entropy", "auth-header"})

# Words that make a nearby value worth reading as a credential (the context pass looks only around these).
# Found with str.find in an ASCII-lowered copy: one C scan a word, far faster than one IGNORECASE alternation.
_CONTEXT_WORDS = (
    "pass", "pwd", "secret", "token", "api_key", "api-key", "apikey", "access_key", "access-key", "accesskey",
    "private", "auth", "credential", "bearer", "signing", "contrase",
)  # fmt: skip
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
# What each keyword regex of detect-secrets needs at the least: one of its words, and a quote.
_KEYWORD_WORDS = ("key", "pass", "pwd", "secret", "contrase")
_ENV_WORDS = ("pass", "pwd", "secret", "token", "key", "credential")
_OPTION_WORDS = ("-password", "-passwd", "token", "secret", "-api-key", "-apikey")
# Lines about hashes and ids, where a long random-looking string is expected and is not a credential.
_HASH_CONTEXT = re.compile(
    r"sha\d*|md5|integrity|checksum|digest|hash|commit|etag|fingerprint|nonce|uuid|request[_-]?id|trace|"
    r"revision|resolved",
    re.IGNORECASE,
)
_WINDOW_BEFORE = 200
_WINDOW_AFTER = 800
_HIGH_ENTROPY_MIN = 20
_PRIVATE_KEY_END = re.compile(r"-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----")
_PRIVATE_KEY_MAX = 64 * 1024
_JWT_TAIL = re.compile(r"[A-Za-z0-9_=-]*")


def find_secrets(text: str) -> list[Secret]:
    """The secrets in ``text``, in order of position; ``[]`` for a text without any."""
    if not text:
        return []
    plugins = _plugins()
    line_starts = [0, *(m.end() for m in re.finditer("\n", text))]
    found: list[tuple[str, int, int]] = [*_shaped(text, plugins), *_in_context(text, plugins)]
    kept: list[tuple[str, int, int]] = []
    # Shaped kinds first, then the longest: an assignment around a GitHub token is a GitHub token.
    for kind, start, end in sorted(found, key=lambda f: (f[0] in _GENERIC, f[1] - f[2], f[1])):
        if all(end <= k_start or start >= k_end for _, k_start, k_end in kept):
            kept.append((kind, start, end))
    return [
        Secret(kind, bisect.bisect_right(line_starts, start), start, end, _mask(text[start:end]))
        for kind, start, end in sorted(kept, key=lambda f: (f[1], f[2]))
    ]


def _mask(value: str) -> str:
    shown = min(4, len(value) // 4)
    return f"{value[:shown]}…({len(value)})"


@dataclass(frozen=True)
class _ContextRegex:
    """A context plugin's regex as run here: case-sensitive over an ASCII-lowered window (several times faster than
    the IGNORECASE original, and the same matches); values are read from the original text by span."""

    kind: str
    regex: re.Pattern[str]
    group: int
    needs: tuple[str, ...]
    """The window must hold one of these (lowered) for the regex to be worth running."""
    whole_line: bool = False
    """Run only on a window that is a whole line (the regex reads the line's start or end)."""
    quoted: bool = False
    """Run only on a window with a quote in it (the regex requires one)."""
    call_is_reference: bool = False
    """A match that assigns a call's result (``secret = get_secret("…")``) is no secret: detect-secrets' rule."""

    @classmethod
    def of(cls, kind: str, regex: re.Pattern[str], group: int, needs: tuple[str, ...], **flags: bool) -> _ContextRegex:
        return cls(kind, re.compile(regex.pattern, regex.flags & ~re.IGNORECASE), group, needs, **flags)


@dataclass(frozen=True)
class _Plugins:
    shaped: tuple[Any, ...]
    context: tuple[_ContextRegex, ...]
    entropy: tuple[Any, ...]
    filters: tuple[Callable[[str], bool], ...]
    indirect: Callable[[str], bool]
    setting_key: Callable[[str, str], bool]


@functools.cache
def _plugins() -> _Plugins:
    # detect-secrets pulls in requests (~150 ms) and its import turns on logging.captureWarnings for the whole
    # process (detect_secrets.core.log): load it on first use, and leave the process's warnings as they were.
    showwarning = warnings.showwarning
    from detect_secrets.filters import heuristic
    from detect_secrets.plugins import (
        aws,
        azure_storage_key,
        basic_auth,
        github_token,
        gitlab_token,
        high_entropy_strings,
        jwt,
        keyword,
        npm,
        openai,
        private_key,
        pypi_token,
        sendgrid,
        slack,
        square_oauth,
        stripe,
        twilio,
    )

    from hive.sidecar.screening import secret_plugins as ours

    if warnings.showwarning is not showwarning:
        logging.captureWarnings(False)
    shaped = (
        private_key.PrivateKeyDetector(),
        aws.AWSKeyDetector(),
        github_token.GitHubTokenDetector(),
        ours.GitHubFineGrainedTokenDetector(),
        gitlab_token.GitLabTokenDetector(),
        slack.SlackDetector(),
        stripe.StripeDetector(),
        ours.StripeLongKeyDetector(),
        openai.OpenAIDetector(),
        ours.OpenAIProjectKeyDetector(),
        ours.AnthropicKeyDetector(),
        ours.GoogleApiKeyDetector(),
        ours.GoogleOAuthDetector(),
        ours.ArmouredPrivateKeyDetector(),
        jwt.JwtTokenDetector(),
        basic_auth.BasicAuthDetector(),
        npm.NpmDetector(),
        ours.NpmAccessTokenDetector(),
        pypi_token.PypiTokenDetector(),
        sendgrid.SendGridDetector(),
        twilio.TwilioKeyDetector(),
        azure_storage_key.AzureStorageKeyDetector(),
        square_oauth.SquareOAuthDetector(),
    )
    return _Plugins(
        shaped=shaped,
        context=(
            *(
                _ContextRegex.of("secret-assignment", regex, group, _KEYWORD_WORDS, quoted=True, call_is_reference=True)
                for regex, group in keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP.items()
            ),
            *(
                _ContextRegex.of(
                    "secret-assignment",
                    regex,
                    ours.EnvAssignmentDetector.value_group,
                    _ENV_WORDS,
                    whole_line=True,
                    call_is_reference=True,  # `token = session.renew(user)` in a traceback is code
                )
                for regex in ours.EnvAssignmentDetector.denylist
            ),
            _ContextRegex.of("auth-header", ours.AuthHeaderDetector.denylist[0], 1, ("bearer", "basic", "token")),
            _ContextRegex.of(
                "auth-header", ours.AuthHeaderDetector.denylist[1], 1, ("x-api", "x-auth", "x-access", "x-goog")
            ),
            *(
                _ContextRegex.of("secret-assignment", regex, ours.CommandLineSecretDetector.value_group, _OPTION_WORDS)
                for regex in ours.CommandLineSecretDetector.denylist
            ),
        ),
        entropy=(high_entropy_strings.Base64HighEntropyString(), high_entropy_strings.HexHighEntropyString()),
        filters=(
            heuristic.is_templated_secret,
            heuristic.is_prefixed_with_dollar_sign,
            heuristic.is_sequential_string,
            heuristic.is_potential_uuid,
            heuristic.is_not_alphanumeric_string,
            ours.is_placeholder,
        ),
        indirect=heuristic.is_indirect_reference,
        setting_key=ours.is_setting_key,
    )


def _shaped(text: str, plugins: _Plugins) -> Iterator[tuple[str, int, int]]:
    """Tokens known by their shape, over the whole text at once."""
    for plugin in plugins.shaped:
        name = type(plugin).__name__
        for regex in plugin.denylist:
            for match in regex.finditer(text):
                # The plugin's own analyze_string confirms the match (the JWT plugin checks its JSON, for one).
                if not any(True for _ in plugin.analyze_string(match.group(0))):
                    continue
                group = _LIBRARY_VALUE_GROUP.get(name, 0) if match.lastindex else 0
                start, end = match.span(group)
                # AWS's own documentation key (AKIAIOSFODNN7EXAMPLE) and its like are examples, not credentials.
                if "example" in text[start:end].lower():
                    continue
                if name == "BasicAuthDetector" and _filtered(plugins, text[start:end]):
                    continue
                kind = _KINDS[name]
                if kind == "private-key":
                    start, end = _private_key_block(text, start, end)
                elif kind == "jwt":
                    # detect-secrets' JWT regex ends lazily, before the signature: the span takes it in.
                    signature = _JWT_TAIL.match(text, end)
                    end = signature.end() if signature else end
                yield kind, start, end


def _private_key_block(text: str, start: int, end: int) -> tuple[int, int]:
    """The whole armoured block around a private key header: from its ``-----BEGIN`` to its ``-----END …-----``."""
    begin = text.rfind("-----", max(0, start - 6), start)
    start = begin if begin >= 0 else start
    closing = _PRIVATE_KEY_END.search(text, end, end + _PRIVATE_KEY_MAX)
    if closing:
        return start, closing.end()
    line_end = text.find("\n", end)
    return start, len(text) if line_end < 0 else line_end


def _in_context(text: str, plugins: _Plugins) -> Iterator[tuple[str, int, int]]:
    """Values that are secrets by where they stand, read in windows around secret-sounding words."""
    lowered = text.translate(_ASCII_LOWER)
    words: list[int] = []
    for word in _CONTEXT_WORDS:
        at = lowered.find(word)
        while at >= 0:
            words.append(at)
            at = lowered.find(word, at + len(word))
    last_start, last_end = -1, -1
    for at in sorted(words):
        # A word well inside the last window was read with it; windows overlap by at most _WINDOW_BEFORE * 2.
        if last_start <= at and at + _WINDOW_BEFORE <= last_end:
            continue
        line_start = text.rfind("\n", 0, at) + 1
        line_end = text.find("\n", at)
        line_end = len(text) if line_end < 0 else line_end
        last_start = max(line_start, at - _WINDOW_BEFORE)
        last_end = min(line_end, at + _WINDOW_AFTER)
        window = text[last_start:last_end].rstrip("\r")
        whole_line = last_start == line_start and last_end == line_end
        lowered_window = lowered[last_start : last_start + len(window)]
        for kind, w_start, w_end in _window_secrets(window, lowered_window, whole_line, plugins):
            yield kind, last_start + w_start, last_start + w_end


def _window_secrets(line: str, lowered: str, whole_line: bool, plugins: _Plugins) -> Iterator[tuple[str, int, int]]:
    quoted = "'" in line or '"' in line or "`" in line
    for context in plugins.context:
        if (
            (context.whole_line and not whole_line)
            or (context.quoted and not quoted)
            or not any(word in lowered for word in context.needs)
        ):
            continue
        # A whole-line regex is anchored at the line's start: one attempt there, not one at every position.
        for match in (context.regex.match(lowered),) if context.whole_line else context.regex.finditer(lowered):
            if match is None:
                continue
            start, end = match.span(context.group)
            value = line[start:end]
            if not (
                _filtered(plugins, value)
                or plugins.setting_key(value, line[:end])
                or (context.call_is_reference and plugins.indirect(line[match.start() : match.end()]))
            ):
                yield context.kind, start, end
    if not quoted or _HASH_CONTEXT.search(line):
        return
    for plugin in plugins.entropy:
        for match in plugin.regex.finditer(line):
            value = match.group(2)
            if (
                len(value) >= _HIGH_ENTROPY_MIN
                and plugin.calculate_shannon_entropy(value) > plugin.entropy_limit
                and not _filtered(plugins, value)
            ):
                yield "high-entropy", *match.span(2)


def _filtered(plugins: _Plugins, value: str) -> bool:
    return any(check(value) for check in plugins.filters)
