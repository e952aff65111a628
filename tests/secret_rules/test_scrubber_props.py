"""The one scrubber (issue 11 item 4): random secrets embedded in random text never survive, as a
whole, in text, in JSON-like trees, or in what an env map's references resolved to.
# contract V1
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acx.envref import reference_values, substitute
from acx.secrets import MIN_SECRET_LENGTH, REDACTED, Scrubber, is_secret_value

secret = st.text(min_size=Scrubber.MIN_LENGTH, max_size=24).filter(lambda s: s not in REDACTED and is_secret_value(s))
noise = st.text(max_size=40)


@settings(max_examples=300, deadline=None)
@given(secrets=st.lists(secret, min_size=1, max_size=4), pieces=st.lists(noise, min_size=1, max_size=6))
def test_no_secret_survives_in_text(secrets: list[str], pieces: list[str]) -> None:
    text = ""
    for i, piece in enumerate(pieces):
        text += piece + secrets[i % len(secrets)]
    scrub = Scrubber()
    scrub.add_secret(secrets)
    out = scrub.text(text)
    assert all(s not in out for s in secrets)
    assert all(s not in scrub(text) for s in secrets)  # messages see at least the secrets


@settings(max_examples=200, deadline=None)
@given(s=secret, key=noise, before=noise, after=noise)
def test_no_secret_survives_in_a_tree_or_its_json(s: str, key: str, before: str, after: str) -> None:
    scrub = Scrubber()
    scrub.add_secret([s])
    tree = {"answer": before + s + after, key + s: [1, {"x": (s, after)}], "n": 3}
    out = scrub.tree(tree)
    # Every string of the written JSON, read back (the encoded bytes may hold escapes such as
    # `\u0000`, whose digits are no secret).
    strings: list[str] = []

    def walk(v: object) -> None:
        if isinstance(v, str):
            strings.append(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(k)
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(json.loads(json.dumps(out)))
    assert all(s not in text for text in strings)


name = st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(n=name, value=secret.filter(lambda v: "}" not in v), prefix=noise, suffix=noise, printed=noise)
def test_the_value_inside_a_reference_is_a_secret(n: str, value: str, prefix: str, suffix: str, printed: str) -> None:
    # `Bearer ${TOKEN}`: the agent prints the token alone; it must go, not only "Bearer <token>".
    raw = prefix.replace("${", "") + "${" + n + "}" + suffix.replace("${", "")
    environ = {n: value}
    resolved, missing = substitute(raw, environ)
    assert not missing
    scrub = Scrubber()
    scrub.add({"K": resolved}, raw={"K": raw}, environ=environ)
    assert value not in scrub.text(printed + value + printed)
    # and without the environment (a component holding only the resolved value)
    assert value in reference_values(raw, resolved) or any(value in v for v in reference_values(raw, resolved))


def test_literal_values_are_scrubbed_from_messages_only() -> None:
    scrub = Scrubber()
    scrub.add(
        {"MODE": "plain-mode", "K": "sk-1234"}, raw={"MODE": "plain-mode", "K": "${KEY}"}, environ={"KEY": "sk-1234"}
    )
    assert scrub.text("plain-mode sk-1234") == "plain-mode ********"
    assert scrub("plain-mode sk-1234") == "******** ********"
    assert not Scrubber() and scrub


def test_overlapping_secrets_and_completed_ones_do_not_survive() -> None:
    scrub = Scrubber()
    scrub.add_secret(["abcdef", "bcdefg", "***y***"])
    assert scrub.text("abcdefg") == "********g" or "bcdefg" not in scrub.text("abcdefg")
    out = scrub.text("xabcdefy***")
    assert "***y***" not in out and "abcdef" not in out


json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | noise
json_tree = st.recursive(
    json_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(noise, inner, max_size=4), max_leaves=20
)


@settings(max_examples=300, deadline=None)
@given(secrets=st.lists(secret, min_size=1, max_size=3), tree=json_tree, where=noise, put=st.booleans())
def test_the_tree_fast_path_changes_nothing(secrets: list[str], tree: object, where: str, put: bool) -> None:
    # contract V1: the one-search pre-check over the JSON text (a tree with no secret is returned
    # as it is) gives the same data as walking every string, with or without a secret inside,
    # whatever the strings hold (quotes, backslashes, control characters: JSON escapes).
    scrub = Scrubber()
    scrub.add_secret(secrets)
    obj = {where + secrets[0]: tree, "k": [where, tree]} if put else {"k": [where, tree]}
    assert json.dumps(scrub.tree(obj)) == json.dumps(scrub._tree(obj))
    if put:
        assert scrub.tree(obj) is not obj


def test_trees_that_do_not_encode_are_still_walked() -> None:
    # contract V1: the fast check cannot encode these; the walk still scrubs every string.
    scrub = Scrubber()
    scrub.add_secret(["sk-abcdef"])
    assert scrub.tree({"a": ["x sk-abcdef \ud800", object]})["a"][0] == f"x {REDACTED} \ud800"
    surrogate = Scrubber()
    surrogate.add_secret(["sk-\udc00-key"])
    assert surrogate.tree({"k": "<sk-\udc00-key>", "n": 1}) == {"k": f"<{REDACTED}>", "n": 1}
    assert scrub.tree({"k": ("a", "sk-abcdef")}) == {"k": ["a", REDACTED]}


@settings(max_examples=300, deadline=None)
@given(secrets=st.lists(secret, max_size=3), tree=json_tree, where=noise, put=st.booleans())
def test_result_files_encoded_once_are_what_scrubbing_then_encoding_gives(
    secrets: list[str], tree: object, where: str, put: bool
) -> None:
    # contract V1: result.json, task.json, checkpoints and transcripts are encoded once when they
    # hold no secret (the encoding is searched, then written); byte for byte what scrubbing the
    # tree and encoding it gives, with or without a secret, with or without secrets at all.
    from acx.interpreter._fs import encode_json, encode_scrubbed_json

    scrub = Scrubber()
    scrub.add_secret(secrets)
    obj = {where + secrets[0]: tree, "k": [where, tree]} if put and secrets else {"k": [where, (tree, 1)]}
    assert encode_scrubbed_json(obj, scrub) == encode_json(scrub.tree(obj))
    if put and secrets:
        assert scrub.in_json(encode_json(obj))
        assert all(s not in json.loads(encode_scrubbed_json(obj, scrub)) for s in secrets)


def test_in_json_finds_secrets_as_json_encodes_them() -> None:
    # contract V1: a key with a quote, a backslash or a non-ASCII character is found in the JSON text.
    import msgspec

    scrub = Scrubber()
    assert not scrub.in_json(b'{"a": "sk-abc"}')  # no secrets: nothing to find
    scrub.add_secret(['sk-"q\\ü'])
    assert scrub.in_json(msgspec.json.encode({"x": ['pre sk-"q\\ü post']}))
    assert scrub.in_json(msgspec.json.encode({'sk-"q\\ü': 1}))
    assert not scrub.in_json(msgspec.json.encode({"x": 'sk-"q\\u'}))


@pytest.mark.parametrize(
    "value", ["none", "NONE", "EMPTY", "dummy", "sk-no-key-required", "Ollama", "not-needed", "abc12"]
)
def test_placeholders_and_short_values_are_not_secret_material(value: str) -> None:
    # contract V1: a publicly known placeholder key or a value too short to be a secret is not
    # masked, so the word stays readable in every file (`evaluation_mode: none`)
    assert not is_secret_value(value)
    scrub = Scrubber()
    scrub.add_secret([value, "sk-real-123456"])
    scrub.add({"MODE": value})
    text = f"evaluation_mode: {value}; key sk-real-123456"
    assert scrub.text(text) == f"evaluation_mode: {value}; key ********"
    assert scrub(text) == scrub.text(text)


def test_a_placeholder_inside_a_real_secret_is_still_masked() -> None:
    # contract V1: the rule is about whole values; a real key that contains a placeholder word is masked whole
    scrub = Scrubber()
    scrub.add_secret(["none-of-your-business"])
    assert scrub.text("k=none-of-your-business none") == "k=******** none"
    assert is_secret_value("sk-abcdef") and MIN_SECRET_LENGTH == 6
