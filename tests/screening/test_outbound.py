"""Outbound screening finds key material and credentials in a text, says where, and never hands the value back.

Every credential here is made up at run time with the right shape (tests/bench/bench_outbound.py's fakes):
none is real, and none sits in the repository.
"""

from __future__ import annotations

import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from hive.sidecar.screening.outbound import Secret, find_secrets
from tests.bench.bench_outbound import fake_secret, load_benign, load_secrets, rates


def rng() -> random.Random:
    return random.Random(2323)


def only(text: str) -> Secret:
    found = find_secrets(text)
    assert len(found) == 1, found
    return found[0]


# required kind -> (fake's kind in the bench, a message it sits in, where {} is the fake)
REQUIRED = {
    "private-key": ("private-key", "the key for the bastion:\n{}\nthanks"),
    "aws-access-key": ("aws-access-key", "use access key {} for the bucket"),
    "github-token": ("github-token", "git clone https://x-access-token:{}@github.com/acme/api.git"),
    "gitlab-token": ("gitlab-token", 'curl --header "PRIVATE-TOKEN: {}" https://gitlab.acme.dev/api/v4/projects'),
    "slack-token": ("slack-token", 'client = WebClient(token="{}")'),
    "stripe-key": ("stripe-key", "the reporting job uses {} for now"),
    "anthropic-key": ("anthropic-key", "client = anthropic.Anthropic(api_key='{}')"),
    "openai-key": ("openai-key", "try my key {} for the eval run"),
    "google-api-key": ("google-api-key", "https://maps.googleapis.com/maps/api/geocode/json?address=Oslo&key={}"),
    "jwt": ("jwt", "the login answered {} and then 401"),
    "secret-assignment": ("password", "DATABASE_PASSWORD={}"),
    "high-entropy": ("hex-secret", 'client.connect(refresh_token="{}", timeout=5)'),
    "auth-header": ("opaque-token", "curl -H 'Authorization: Bearer {}' https://api.acme.dev/v2/jobs"),
}


@pytest.mark.parametrize("kind", sorted(REQUIRED))
def test_each_required_kind_is_found_in_a_realistic_message_with_its_exact_span(kind: str) -> None:
    fake_kind, template = REQUIRED[kind]
    value = fake_secret(fake_kind, rng())
    before, after = template.split("{}")
    text = before + value + after

    secret = only(text)

    assert secret.kind == kind
    assert (secret.start, secret.end) == (len(before), len(before) + len(value))
    assert secret.line == before.count("\n") + 1


def test_env_assignments_of_aws_secrets_and_database_passwords_are_found() -> None:
    aws_secret, password = fake_secret("aws-secret-key", rng()), fake_secret("password", rng())
    text = f"AWS_REGION=eu-west-1\nAWS_SECRET_ACCESS_KEY={aws_secret}\nDATABASE_PASSWORD={password}\nDEBUG=1\n"

    found = find_secrets(text)

    assert [(s.kind, s.line, text[s.start : s.end]) for s in found] == [
        ("secret-assignment", 2, aws_secret),
        ("secret-assignment", 3, password),
    ]


def test_a_file_with_windows_line_endings_is_read_the_same() -> None:
    password = fake_secret("password", rng())
    text = f"DEBUG=1\r\nDATABASE_PASSWORD={password}\r\nPORT=5432\r\n"

    secret = only(text)

    assert (secret.kind, secret.line, text[secret.start : secret.end]) == ("secret-assignment", 2, password)


def test_an_openssh_private_key_is_one_secret_from_its_begin_line_to_its_end_line() -> None:
    block = fake_secret("private-key", rng())
    text = f"$ cat ~/.ssh/id_ed25519\n{block}\n$ ssh-add\n"

    secret = only(text)

    assert secret.kind == "private-key"
    assert text[secret.start : secret.end] == block
    assert block.startswith("-----BEGIN OPENSSH PRIVATE KEY-----") and block.endswith(
        "-----END OPENSSH PRIVATE KEY-----"
    )
    assert secret.line == 2


def test_a_private_key_inside_a_service_account_json_is_found() -> None:
    block = fake_secret("pkcs8-private-key", rng()).replace("\n", "\\n")
    text = f'{{\n  "type": "service_account",\n  "private_key": "{block}\\n",\n  "client_email": "ci@acme.iam"\n}}'

    secret = only(text)

    assert secret.kind == "private-key" and text[secret.start : secret.end] == block


def test_a_jwt_is_found_whole_and_a_string_merely_starting_like_one_is_not() -> None:
    token = fake_secret("jwt", rng())

    secret = only(f"Authorization: Bearer {token}")

    assert secret.kind == "jwt" and secret.end - secret.start == len(token)
    assert find_secrets("the header always starts with eyJhbGciOi, the base64 of a brace") == []


def test_a_token_in_an_assignment_is_reported_once_under_its_own_kind() -> None:
    token = fake_secret("github-token", rng())

    secret = only(f"GITHUB_TOKEN={token}")

    assert secret.kind == "github-token" and secret.end - secret.start == len(token)


def test_the_masked_form_shows_at_most_four_characters_and_the_length_never_the_secret() -> None:
    password = fake_secret("password", rng())
    key = fake_secret("anthropic-key", rng())
    text = f'password = "{password}"\nANTHROPIC_API_KEY={key}\nDB_PASSWORD=Kq7vLp2\n'

    found = find_secrets(text)

    assert [s.masked for s in found] == [f"{password[:4]}…({len(password)})", f"sk-a…({len(key)})", "K…(7)"]
    for secret in found:
        value = text[secret.start : secret.end]
        assert value not in secret.masked and value not in repr(secret)


@pytest.mark.parametrize(
    "text",
    [
        "diff --git a/sidecar/auth.py b/sidecar/auth.py\nindex 3f2a1c9..8b7e6d0 100644\n--- a/sidecar/auth.py\n"
        "+++ b/sidecar/auth.py\n@@ -10,6 +10,7 @@\n-def check(password: str) -> bool:\n"
        "+def check(password: str, *, stored: bytes) -> bool:\n     return bcrypt.checkpw(password.encode(), stored)\n",
        'Traceback (most recent call last):\n  File "/work/main/sidecar/mail/notify.py", line 88, in send\n'
        "    token = await self._client.refresh(session_id)\nKeyError: 'token'\n",
        '"node_modules/jsonwebtoken": {\n  "version": "9.0.2",\n  "integrity": '
        '"sha512-PRp66vJ865SSqOlgqS8hujT5U4AOgMfhrwYIuIhfKaoSCZcirrmASQr8CX7cUg+RMih+hgznrjp99o+W4pJLHQ=="\n},',
        "the failing run is 3b241101-e2bb-4255-8caf-4136c566a962, logs attached",
        "merged in 9fceb02d0ae598e95dc970b74767f19372d61af8, can you rebase?",
        "screenshot: data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA"
        "60e6kgAAAABJRU5ErkJggg==",
        'password = "<placeholder>"  # set it in .env, never commit it',
        "export ANTHROPIC_API_KEY=<your-api-key>\nOPENAI_API_KEY=sk-...",
        "env:\n  GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}",
        "aws_access_key_id = AKIAIOSFODNN7EXAMPLE",
        "TOKEN_EXPIRY=3600\nPASSWORD_MIN_LENGTH=12\nSECRET_NAME=prod-db-creds",
        "",
    ],
    ids=[
        "git diff",
        "traceback",
        "package-lock integrity",
        "uuid",
        "git sha",
        "png base64",
        "doc placeholder",
        "env placeholders",
        "ci secret reference",
        "aws documentation key",
        "settings about secrets",
        "empty",
    ],
)
def test_benign_text_teammates_send_gives_nothing(text: str) -> None:
    assert find_secrets(text) == []


def test_secrets_come_in_order_of_position_with_their_lines() -> None:
    r = rng()
    aws, gitlab, google = (
        fake_secret("aws-access-key", r),
        fake_secret("gitlab-token", r),
        fake_secret("google-api-key", r),
    )
    text = f"first {google}\nnothing here\n  then {aws} and {gitlab}\n"

    found = find_secrets(text)

    assert [(s.kind, s.line) for s in found] == [("google-api-key", 1), ("aws-access-key", 3), ("gitlab-token", 3)]
    assert [text[s.start : s.end] for s in found] == [google, aws, gitlab]


def test_the_corpora_are_found_and_left_alone() -> None:
    secrets, benign = load_secrets(), load_benign()
    assert len(secrets) >= 60 and len(benign) >= 200

    result = rates(secrets, benign)

    assert result["detection"] >= 0.95, result["missed"]
    assert result["false_hits"] <= 0.01, result["false_hit_lines"]


def test_find_secrets_gives_the_same_answers_from_many_threads_at_once() -> None:
    texts = [carrier.text for carrier in load_secrets()] + load_benign()[:40]
    alone = [find_secrets(text) for text in texts]

    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(find_secrets, texts * 3))

    assert together == alone * 3


def test_loading_detect_secrets_leaves_the_process_warnings_where_they_were() -> None:
    # detect_secrets.core.log turns on logging.captureWarnings when imported; a fresh interpreter shows it undone.
    check = (
        "import warnings; before = warnings.showwarning\n"
        "from hive.sidecar.screening.outbound import find_secrets\n"
        "assert find_secrets('password = \"Zq8vLm2pR7\"')\n"
        "assert warnings.showwarning is before, warnings.showwarning\n"
    )
    subprocess.run([sys.executable, "-c", check], check=True, timeout=60)
