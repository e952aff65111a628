"""Today's behaviour of every ``${VAR}`` reference variant and of the secret rules, pinned before
they were merged into the leaf modules :mod:`acx.envref` and :mod:`acx.secrets` (issue 12 item 5).

Each row was produced by the variant it names before the merge; after it, every variant goes
through one implementation and the rows must still hold. The one deliberate change is marked.
# contract R6, V1
"""

from __future__ import annotations

import pytest

from acx.compiler._interpolate import embedded_ref_diagnostic, env_ref_name, has_embedded_ref
from acx.compiler._planner import required_env_names
from acx.compiler._redact import (
    is_container_key,
    is_secret_name,
    is_sensitive_key,
    is_sensitive_path,
    mask_url_credentials,
    redact_value,
)
from acx.interpreter._envvars import MissingEnvError, referenced_names, resolve_value

ENV = {"X": "xv", "Y": "", "TOKEN": "tk"}

# value → (required, optional) names, resolved value (or missing names), env map required names,
#          whole-field name, embedded?, redacted, E0212 kind
ROWS: list[tuple[str, set[str], set[str], object, list[str], str | None, bool, str, str | None]] = [
    ("${X}", {"X"}, set(), "xv", ["X"], "X", False, "${X}", None),
    ("${_a1}", {"_a1"}, set(), ("missing", ["_a1"]), ["_a1"], "_a1", False, "${_a1}", None),
    ("${1X}", set(), set(), "${1X}", [], None, True, "********", "digit"),
    ("${}", set(), set(), "${}", [], None, True, "********", "empty"),
    ("${ X }", set(), set(), "${ X }", [], None, True, "********", "spaces"),
    ("${X", set(), set(), "${X", [], None, True, "********", "closing"),
    ("${X:-}", set(), {"X"}, "xv", [], None, True, "********", "default"),
    ("${X:-d}", set(), {"X"}, "xv", [], None, True, "********", "default"),
    ("${X:-\n}", set(), {"X"}, "xv", [], None, True, "********", "default"),
    ("${X:-a{b}", set(), {"X"}, "xv", [], None, True, "********", "longer"),
    ("${X:-a}b}", set(), {"X"}, "xvb}", [], None, True, "********", "longer"),
    ("pre ${X} post", {"X"}, set(), "pre xv post", ["X"], None, True, "********", "longer"),
    ("${X}${Y:-y}", {"X"}, {"Y"}, "xvy", ["X"], None, True, "********", "longer"),
    ("$X", set(), set(), "$X", [], None, False, "********", None),
    ("$${X}", {"X"}, set(), "$xv", ["X"], None, True, "********", "longer"),
    ("${X-d}", set(), set(), "${X-d}", [], None, True, "********", "other"),
    ("${X:=d}", set(), set(), "${X:=d}", [], None, True, "********", "other"),
    ("${a.b}", set(), set(), "${a.b}", [], None, True, "********", "other"),
    ("Bearer ${TOKEN}", {"TOKEN"}, set(), "Bearer tk", ["TOKEN"], None, True, "********", "longer"),
    ("${X:-${Y}}", set(), {"X"}, "xv}", [], None, True, "********", "longer"),
    ("${Y}", {"Y"}, set(), ("missing", ["Y"]), ["Y"], "Y", False, "${Y}", None),
    ("${Y:-y}", set(), {"Y"}, "y", [], None, True, "********", "default"),
    ("", set(), set(), "", [], None, False, "", None),
    ("plain", set(), set(), "plain", [], None, False, "********", None),
]

_KIND = {
    "digit": "cannot start with a digit",
    "empty": "the variable name is empty",
    "spaces": "spaces around the name",
    "closing": "the closing `}` is missing",
    "default": "(a default value) is only supported in env-variable maps",
    "longer": "`${...}` inside a longer string",
    "other": "a character other than letters, digits and `_`",
}


@pytest.mark.parametrize("row", ROWS, ids=[repr(r[0]) for r in ROWS])
def test_reference_variants_agree_with_the_pinned_table(row: tuple) -> None:
    value, required, optional, resolved, map_required, whole, embedded, redacted, kind = row
    assert referenced_names(value) == (required, optional)
    try:
        got: object = resolve_value(value, ENV)
    except MissingEnvError as exc:
        got = ("missing", exc.names)
    assert got == resolved
    assert required_env_names({"k": value}) == map_required
    assert env_ref_name(value) == whole
    assert has_embedded_ref(value) is embedded
    assert redact_value(value) == redacted
    if kind is not None:
        assert _KIND[kind] in embedded_ref_diagnostic(value, None, "p").message


def test_a_reference_followed_by_a_newline_is_not_a_whole_field_reference() -> None:
    # Deliberate change of the merge: before it, the compiler's `^...$` + match accepted "${X}\n"
    # as the whole-field reference X (and the redactor showed it) while the interpreter's
    # fullmatch did not, so a secret written as a YAML block scalar stayed an unresolved reference.
    # One rule now: a whole-field reference is exactly `${NAME}`.
    assert env_ref_name("${X}\n") is None
    assert has_embedded_ref("${X}\n") is True


SENSITIVE_KEYS = [
    "api_key",
    "API-KEY",
    "token",
    "Token_ID",
    "authorization",
    "proxy_authorization",
    "cookie",
    "set_cookie",
    "jwt",
    "aksk",
    "password",
    "db_password",
    "client_secret",
    "refresh_token",
    "id_jwt",
]
PLAIN_KEYS = ["wrap_api_key", "WRAP-API-KEY", "key", "tokens", "max_tokens", "mytoken", "passwordless", "secret", "url"]
SECRET_NAMES = [
    "OPENAI_API_KEY",
    "GITHUB_TOKEN",
    "DB_PASSWORD_2",
    "MYPASSWD",
    "PASSPHRASE_X",
    "AWS_SECRET_ACCESS_KEY",
    "MY_APIKEY_V2",
    "SECRET",
    "passwordless",
]
PLAIN_NAMES = ["WRAP_API_KEY", "HOME", "SECRETARY", "MODEL_BASE_URL", "TOKENS", "KEYRING"]


@pytest.mark.parametrize("key", SENSITIVE_KEYS)
def test_sensitive_keys(key: str) -> None:
    assert is_sensitive_key(key)
    assert is_sensitive_path(("requests", 0, "model", key))


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_plain_keys(key: str) -> None:
    assert not is_sensitive_key(key)
    assert not is_sensitive_path(("model", key))


@pytest.mark.parametrize("name", SECRET_NAMES + SENSITIVE_KEYS)
def test_secret_variable_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_plain_variable_names(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    "key",
    [
        "auth",
        "authentication",
        "credentials",
        "headers",
        "env",
        "env_variables",
        "run_env_variables",
        "evaluation_env_variables",
        "evaluation_environment_env_variables",
    ],
)
def test_container_keys(key: str) -> None:
    assert is_container_key(key) and is_container_key(key.upper())
    assert is_sensitive_path(("environment", key, "ANYTHING"))


def test_url_credentials() -> None:
    assert mask_url_credentials("http://u:pw@h:1/x") == "http://u:********@h:1/x"
    text = "see https://bob:s3cr3t@example.test and"
    assert mask_url_credentials(text) == "see https://bob:********@example.test and"
    assert mask_url_credentials("http://h:80/x") == "http://h:80/x"
    assert mask_url_credentials("mailto:a@b") == "mailto:a@b"


FRAME_MASKED = [
    "api_key: abcd",
    "  my_token = 'abcd'",
    "mytoken: abcd",
    "dbpassword: abcd",
    '"authorization": "Bearer abcd"',
    "set_cookie: abcd",
    "token_id: abcd",
    "x_jwt: abcd",
    "aksk: abcd",
]
FRAME_KEPT = ["wrap_api_key: true", "api_key: ${KEY}", 'api_key = secret("KEY")', "max_tokens: 12"]


@pytest.mark.parametrize("line", FRAME_MASKED)
def test_code_frames_mask_literal_secret_values(line: str) -> None:
    from acx.diagnostics import _mask_secrets

    masked = _mask_secrets(line)
    assert "abcd" not in masked and len(masked) == len(line)


@pytest.mark.parametrize("line", FRAME_KEPT)
def test_code_frames_keep_references_and_flags(line: str) -> None:
    from acx.diagnostics import _mask_secrets

    assert _mask_secrets(line) == line


def test_one_implementation_of_the_reference_pattern() -> None:
    """No module but :mod:`acx.envref` writes a ``${NAME}`` regex of its own (the fake driver's shell
    emulation and the Dockerfile ``ARG`` expansion are other languages, not acx references)."""
    import re
    from pathlib import Path

    import acx

    root = Path(acx.__file__).parent
    allowed = {"envref.py", "fake.py", "_docker_build.py"}
    pattern = re.compile(r"re\.compile\([^)]*\\\$\\\{")
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if p.name not in allowed and pattern.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_secret_key_list_lives_in_one_place() -> None:
    import acx.compiler._redact as redact
    import acx.diagnostics as diagnostics
    import acx.secrets as secrets

    assert redact.SENSITIVE_KEYS is secrets.SENSITIVE_KEYS
    assert redact.CONTAINER_KEYS is secrets.CONTAINER_KEYS
    assert set(diagnostics._CONTAINER_KEYS) == set(secrets.CONTAINER_KEYS)


def test_leaves_import_only_the_standard_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys; import acx.envref, acx.secrets; "
        "bad = sorted(m for m in sys.modules if m.startswith('acx.') and m not in "
        "('acx.envref', 'acx.secrets', 'acx.errors', 'acx.diagnostics')); "
        "bad += [m for m in ('msgspec', 'trio', 'lark', 'ruamel', 'docker') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
