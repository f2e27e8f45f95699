"""detect-secrets plugins for the credentials its own plugins miss, and one filter for documentation placeholders.

These are ordinary detect-secrets plugins (``RegexBasedDetector`` subclasses, each with a ``secret_type`` of
its own so none shadows a library plugin) and ordinary filter functions, so the ``detect-secrets`` CLI can load
them too::

    detect-secrets scan --plugin sidecar/screening/secret_plugins.py \\
        --filter file://sidecar/screening/secret_plugins.py::is_placeholder

:mod:`hive.sidecar.screening.outbound` instantiates them next to the library's own. A plugin whose secret is
a part of its match (the value after a key, the token after ``Bearer``) says so in ``value_group``.
"""

from __future__ import annotations

import re
from typing import ClassVar

from detect_secrets.plugins.base import RegexBasedDetector

# A secret-sounding key: what .env files, shell exports, YAML and INI files call their credentials. detect-secrets'
# KeywordDetector leaves out "token", "credential" and "auth", and reads unquoted values only in config files.
_SECRET_KEY = (
    r"[A-Za-z0-9_.-]*(?:pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|signing[_-]?key|encryption[_-]?key|master[_-]?key|credentials?)[A-Za-z0-9_.-]*"
)


class AnthropicKeyDetector(RegexBasedDetector):
    """Anthropic API, admin and OAuth keys: ``sk-ant-api03-…``, ``sk-ant-admin01-…``, ``sk-ant-oat01-…``."""

    secret_type = "Anthropic API Key"
    denylist: ClassVar[list[re.Pattern[str]]] = [re.compile(r"sk-ant-[a-z]{2,8}\d{2}-[A-Za-z0-9_-]{32,200}")]


class OpenAIProjectKeyDetector(RegexBasedDetector):
    """OpenAI project, service-account and admin keys (``sk-proj-…``), whose tails detect-secrets' regex cuts short."""

    secret_type = "OpenAI Project Key"
    denylist: ClassVar[list[re.Pattern[str]]] = [
        re.compile(r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{40,250}(?![A-Za-z0-9_-])")
    ]


class GoogleApiKeyDetector(RegexBasedDetector):
    """Google Cloud and Firebase API keys: ``AIza`` then 35 characters."""

    secret_type = "Google API Key"
    denylist: ClassVar[list[re.Pattern[str]]] = [re.compile(r"AIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])")]


class GoogleOAuthDetector(RegexBasedDetector):
    """Google OAuth client secrets (``GOCSPX-…``) and access tokens (``ya29.…``)."""

    secret_type = "Google OAuth Secret"
    denylist: ClassVar[list[re.Pattern[str]]] = [
        re.compile(r"GOCSPX-[A-Za-z0-9_-]{28}(?![A-Za-z0-9_-])"),
        re.compile(r"ya29\.[A-Za-z0-9_-]{30,}"),
    ]


class GitHubFineGrainedTokenDetector(RegexBasedDetector):
    """GitHub fine-grained personal access tokens (``github_pat_…``), which detect-secrets' GitHub plugin predates."""

    secret_type = "GitHub Fine-Grained Token"
    denylist: ClassVar[list[re.Pattern[str]]] = [re.compile(r"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}\b")]


class StripeLongKeyDetector(RegexBasedDetector):
    """Stripe live keys at their current length (up to 247 characters); detect-secrets matches the first 24 only."""

    secret_type = "Stripe Live Key"
    denylist: ClassVar[list[re.Pattern[str]]] = [re.compile(r"(?:sk|rk)_live_[0-9a-zA-Z]{24,247}\b")]


class ArmouredPrivateKeyDetector(RegexBasedDetector):
    """Any PEM-armoured private key, encrypted ones included (detect-secrets lists eight headers by name)."""

    secret_type = "Armoured Private Key"
    denylist: ClassVar[list[re.Pattern[str]]] = [re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")]


class EnvAssignmentDetector(RegexBasedDetector):
    """A line that is only ``KEY=value`` (or ``export KEY=value``, ``key: value``) under a secret-sounding key, or a
    command it prefixes (``API_TOKEN=… ./deploy``)."""

    secret_type = "Secret Assignment Line"
    value_group = 1
    denylist: ClassVar[list[re.Pattern[str]]] = [
        re.compile(
            r"^[ \t]*(?:export[ \t]+|set[ \t]+|-[ \t]+)?[\"']?" + _SECRET_KEY + r"[\"']?[ \t]*(?:=|:)[ \t]*"
            r"[\"']?([^\s\"'#]{6,})[\"']?[ \t]*,?[ \t]*(?:#.*)?$",
            re.IGNORECASE | re.MULTILINE,
        ),
        re.compile(r"^[ \t]*(?:export[ \t]+)?" + _SECRET_KEY + r"=[\"']?([^\s\"'#]{6,})[\"']?[ \t]+\S", re.IGNORECASE),
    ]


class CommandLineSecretDetector(RegexBasedDetector):
    """A credential passed as a command-line option: ``--password=…``, ``--token …``."""

    secret_type = "Command-Line Secret"
    value_group = 1
    denylist: ClassVar[list[re.Pattern[str]]] = [
        re.compile(
            r"(?<![\w-])--?[a-z-]*(?:password|passwd|token|secret|api-key|apikey)[= ][\"']?([^\s\"'$<{]{6,})",
            re.IGNORECASE,
        )
    ]


class NpmAccessTokenDetector(RegexBasedDetector):
    """npm access tokens (``npm_…``) wherever they stand; detect-secrets finds them only in an ``.npmrc`` line."""

    secret_type = "NPM Access Token"
    denylist: ClassVar[list[re.Pattern[str]]] = [re.compile(r"npm_[A-Za-z0-9]{36}\b")]


class AuthHeaderDetector(RegexBasedDetector):
    """A credential in an HTTP header: ``Authorization: Bearer …``, ``-H 'X-Api-Key: …'``."""

    secret_type = "Authorization Header"
    value_group = 1
    denylist: ClassVar[list[re.Pattern[str]]] = [
        re.compile(r"\b(?:bearer|basic|token)[ \t]+([A-Za-z0-9._~+/-]{16,}={0,2})", re.IGNORECASE),
        re.compile(
            r"\bx-(?:api-key|auth-token|access-token|goog-api-key)[\"']?[ \t]*:[ \t]*[\"']?"
            r"([A-Za-z0-9._~+/-]{16,}={0,2})",
            re.IGNORECASE,
        ),
    ]


# Words that mark a documentation value rather than a credential ("<your-token>", "changeme", "xxxxxx").
_PLACEHOLDER_WORDS = re.compile(
    r"example|sample|placeholder|changeme|change[_-]me|dummy|redacted|your|replace|insert|fixme|todo|"
    r"password|passwd|secret|token|x{4,}|\*{3,}|\.{3}|…|foobar|hunter2|test",
    re.IGNORECASE,
)
_NOT_A_SECRET = frozenset(
    "true false yes no on off none null nil undefined string str int bool bytes required optional empty default "
    "env enabled disabled postgres root admin guest mysql".split()
)
_TEMPLATED = re.compile(r"\$\{|\$\(|\{\{|%\(|%s|<[^>]*>|\benv\(|getenv|environ|process\.env|secrets\.|vault:")


def is_placeholder(secret: str) -> bool:
    """True for a value that stands for a credential in documentation or code, not a credential itself.

    A detect-secrets filter (its argument name, ``secret``, is how detect-secrets injects the value).
    """
    value = secret.strip("'\"`")
    if value.lower() in _NOT_A_SECRET:
        return True
    if _TEMPLATED.search(value) or _PLACEHOLDER_WORDS.search(value):
        return True
    # A path, a URL without credentials, or a dotted attribute names where a secret lives.
    return value.startswith(("/", "./", "~/", "http://", "https://", "file:")) or bool(
        re.fullmatch(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", value)
    )


# The key a value is assigned to, read back from the text before the value: `KEY=`, `"key": "`, `key => '`.
_KEY_BEFORE = re.compile(r"([A-Za-z0-9_.-]+)[\"'\]]*[ \t]*(?:[:=!]{1,3}>?|\(|[ \t])[ \t]*@?[\"'`]?$")
# Keys that name a setting about a credential (its length, lifetime, file, URL, owner) rather than holding one.
_SETTING_SUFFIX = re.compile(
    r"(?:^|[_.-])(?:urls?|uris?|endpoint|host|port|file|path|dir|name|id|length|len|min|max|ttl|expiry|expires|"
    r"expiration|timeout|type|header|algorithm|alg|enabled|required|mode|provider|version|region|scopes?|count|"
    r"limit|prefix|kind|field|param|env|var|policy|rotation|hint|label|format|location|ref|arn|user|username|"
    r"login|email|issuer|audience|realm|method|hash|hashed|digest|salt_rounds|cost|strength|chars|regex|pattern)$",
    re.IGNORECASE,
)


def is_setting_key(secret: str, line: str) -> bool:
    """True when the value is assigned to a key that names a setting, such as ``PASSWORD_MIN_LENGTH`` or ``TOKEN_URL``.

    A detect-secrets filter (it takes ``secret`` and ``line`` as detect-secrets injects them).
    """
    index = line.rfind(secret)
    if index < 0:
        return False
    key = _KEY_BEFORE.search(line, 0, index)
    # camelCase keys (secretName, tokenUrl) split as snake_case ones do.
    return bool(key and _SETTING_SUFFIX.search(re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key.group(1))))
