"""`acx lsp` end to end: `python3 -m acx lsp` as a subprocess, driven over stdio by a real LSP
client (pytest-lsp), as an editor drives it (issue 27)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, "-m", "acx", "lsp", "--debounce-ms", "150"], server_env=ENV
    ),
)
async def client(lsp_client: LanguageClient):  # type: ignore[no-untyped-def]
    await lsp_client.initialize_session(
        T.InitializeParams(capabilities=client_capabilities("neovim"), root_uri=EXAMPLES.as_uri())
    )
    yield
    await lsp_client.shutdown_session()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name in ("nightly.acx", "common.acx", "quickstart.acx", "run-config.acx", "docker-smoke.acx"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    (tmp_path / "data").mkdir()
    shutil.copy(EXAMPLES / "data" / "lang-qa.jsonl", tmp_path / "data" / "lang-qa.jsonl")
    return tmp_path


def _open(client: LanguageClient, path: Path, text: str | None = None) -> str:
    uri = path.as_uri()
    client.text_document_did_open(
        T.DidOpenTextDocumentParams(
            T.TextDocumentItem(
                uri=uri, language_id="acx", version=1, text=text if text is not None else path.read_text()
            )
        )
    )
    return uri


async def _diagnostics(client: LanguageClient, uri: str, version: int) -> list[T.Diagnostic]:
    import asyncio

    async def wait() -> list[T.Diagnostic]:
        while True:
            params = await client.wait_for_notification(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
            if params.uri == uri and params.version == version:
                return list(params.diagnostics)

    return await asyncio.wait_for(wait(), 60)  # a missing publish fails the test, never hangs it


def _pos(text: str, marker: str, after: bool = True) -> T.Position:
    k = text.index(marker) + (len(marker) if after else 0)
    line = text.count("\n", 0, k)
    return T.Position(line=line, character=k - (text.rfind("\n", 0, k) + 1))


@pytest.mark.asyncio
async def test_diagnostics_after_an_edit_match_acx_check(client: LanguageClient, project: Path) -> None:
    spec = project / "nightly.acx"
    text = spec.read_text()
    uri = _open(client, spec, text)
    assert await _diagnostics(client, uri, 1) == []
    broken = text.replace("max_retries = 1", "max_retrys = 1")
    client.text_document_did_change(
        T.DidChangeTextDocumentParams(
            text_document=T.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[T.TextDocumentContentChangeWholeDocument(text=broken)],
        )
    )
    got = await _diagnostics(client, uri, 2)
    # The same code, span and help as `acx check --format json` on the same text saved to disk.
    spec.write_text(broken)
    import json

    out = subprocess.run(
        [sys.executable, "-m", "acx", "check", "--format", "json", str(spec)], capture_output=True, text=True, env=ENV
    )
    expected = json.loads(out.stdout)
    expected = expected["diagnostics"] if isinstance(expected, dict) else expected
    assert [d.code for d in got] == [e["code"] for e in expected] == ["E0203"]
    span = expected[0]["span"]
    assert got[0].range.start == T.Position(line=span["line"] - 1, character=span["col"] - 1)
    assert expected[0]["help"] in got[0].message


@pytest.mark.asyncio
async def test_unsaved_import_errors_are_reported_at_the_import(client: LanguageClient, project: Path) -> None:
    common = project / "common.acx"
    _open(client, common, common.read_text() + "let oops = [1,\n")  # open and unsaved: a syntax error
    spec = project / "nightly.acx"
    text = spec.read_text()
    uri = _open(client, spec, text)
    got = await _diagnostics(client, uri, 1)
    imported = [d for d in got if "in imported file common.acx" in d.message]
    assert len(imported) == 1 and str(imported[0].code).startswith("E01")  # the syntax error, at the import
    assert imported[0].range.start.line == _pos(text, 'import "common.acx"', after=False).line
    assert imported[0].related_information
    assert imported[0].related_information[0].location.uri == common.as_uri()


#: Ten cursor positions in the examples: (file, text before the cursor, a label that must be offered).
COMPLETIONS = [
    ("nightly.acx", "    progress = ", "plain"),
    ("nightly.acx", "    harness ", "openai_chat"),
    ("nightly.acx", "      attempts {\n        ", "strategy"),
    ("nightly.acx", "        dataset = ", "qa_dataset"),  # a let of the imported common.acx
    ("nightly.acx", 'import "', "quickstart.acx"),
    ("run-config.acx", "  pull = ", "missing"),
    ("run-config.acx", "\nenvironment docker {\n  ", "pull"),  # run-config form: per-id params
    ("quickstart.acx", "  environment host_process {\n    ", "inherit_env"),
    ("docker-smoke.acx", "    run_network_policy = ", "no_network"),
    ("docker-smoke.acx", "    artifact_limits {\n      ", "max_files"),
]


@pytest.mark.asyncio
async def test_completion_at_ten_positions_of_the_examples(client: LanguageClient, project: Path) -> None:
    for name, marker, label in COMPLETIONS:
        path = project / name
        text = path.read_text()
        uri = _open(client, path, text)
        result = await client.text_document_completion_async(
            T.CompletionParams(text_document=T.TextDocumentIdentifier(uri=uri), position=_pos(text, marker))
        )
        assert result is not None
        items = result.items if isinstance(result, T.CompletionList) else result
        labels = [i.label for i in items]
        assert label in labels, (marker, labels)
    # component ids carry their registry description
    text = (project / "nightly.acx").read_text()
    result = await client.text_document_completion_async(
        T.CompletionParams(
            text_document=T.TextDocumentIdentifier(uri=(project / "nightly.acx").as_uri()),
            position=_pos(text, "    harness "),
        )
    )
    items = result.items if isinstance(result, T.CompletionList) else result
    chat = next(i for i in items if i.label == "openai_chat")
    assert chat.documentation and "chat" in str(chat.documentation).lower()


@pytest.mark.asyncio
async def test_hover_key_docs_and_value_provenance(client: LanguageClient, project: Path) -> None:
    path = project / "nightly.acx"
    text = path.read_text()
    uri = _open(client, path, text)
    key = await client.text_document_hover_async(
        T.HoverParams(text_document=T.TextDocumentIdentifier(uri=uri), position=_pos(text, "max_tok"))
    )
    assert key is not None and "completion token cap" in str(key.contents)
    value = await client.text_document_hover_async(
        T.HoverParams(text_document=T.TextDocumentIdentifier(uri=uri), position=_pos(text, "run_timeout = 1"))
    )
    assert value is not None
    shown = str(value.contents)
    assert "execution.run_timeout_seconds = 600" in shown and "winner" in shown and "nightly.acx:25" in shown
    secret = await client.text_document_hover_async(
        T.HoverParams(text_document=T.TextDocumentIdentifier(uri=uri), position=_pos(text, "api_key = sec"))
    )
    assert secret is not None and "${MODEL_API_KEY}" in str(secret.contents)


def test_hover_never_shows_a_secret_value(project: Path) -> None:
    # A secret() read from the environment stays a reference in hover, whatever its value.
    from acx.lsp import hover

    text = (project / "nightly.acx").read_text()
    os.environ["MODEL_API_KEY"] = "sk-very-secret-value"
    try:
        pos = _pos(text, "api_key = sec")
        shown = hover(str(project / "nightly.acx"), text, pos.line, pos.character, cwd=str(project)) or ""
    finally:
        del os.environ["MODEL_API_KEY"]
    assert "MODEL_API_KEY" in shown and "sk-very-secret-value" not in shown


@pytest.mark.asyncio
async def test_definition_across_an_import(client: LanguageClient, project: Path) -> None:
    path = project / "nightly.acx"
    text = path.read_text()
    uri = _open(client, path, text)
    result = await client.text_document_definition_async(
        T.DefinitionParams(text_document=T.TextDocumentIdentifier(uri=uri), position=_pos(text, "dataset = qa_d"))
    )
    assert isinstance(result, list) and len(result) == 1
    assert result[0].uri == (project / "common.acx").as_uri()
    common = (project / "common.acx").read_text()
    start = _pos(common, "let qa_dataset", after=False)
    assert result[0].range.start == T.Position(line=start.line, character=start.character + len("let "))
    imp = await client.text_document_definition_async(
        T.DefinitionParams(text_document=T.TextDocumentIdentifier(uri=uri), position=_pos(text, 'import "comm'))
    )
    assert isinstance(imp, list) and imp[0].uri == (project / "common.acx").as_uri()


@pytest.mark.asyncio
async def test_formatting_equals_acx_fmt(client: LanguageClient, project: Path) -> None:
    path = project / "nightly.acx"
    messy = (
        path.read_text()
        .replace("  task_concurrency = 8", "task_concurrency=8   ")
        .replace("    progress = plain", "progress   =plain")
    )
    uri = _open(client, path, messy)
    edits = await client.text_document_formatting_async(
        T.DocumentFormattingParams(
            text_document=T.TextDocumentIdentifier(uri=uri), options=T.FormattingOptions(tab_size=2, insert_spaces=True)
        )
    )
    assert edits and len(edits) == 1
    expected = subprocess.run(
        [sys.executable, "-m", "acx", "fmt", "-"], input=messy, capture_output=True, text=True, env=ENV, check=True
    ).stdout
    assert edits[0].new_text == expected != messy


@pytest.mark.asyncio
async def test_symbols_and_rename(client: LanguageClient, project: Path) -> None:
    path = project / "nightly.acx"
    text = path.read_text()
    uri = _open(client, path, text)
    symbols = await client.text_document_document_symbol_async(
        T.DocumentSymbolParams(text_document=T.TextDocumentIdentifier(uri=uri))
    )
    assert symbols is not None
    assert [s.name for s in symbols] == ["orchestration nightly", "run qa-${model_id}"]
    edit = await client.text_document_rename_async(
        T.RenameParams(
            text_document=T.TextDocumentIdentifier(uri=uri), position=_pos(text, "in mod"), new_name="all_models"
        )
    )
    assert edit is not None and edit.changes is not None
    assert set(edit.changes) == {uri, (project / "common.acx").as_uri()}
    assert all(e.new_text == "all_models" for es in edit.changes.values() for e in es)


@pytest.mark.asyncio
async def test_a_burst_of_edits_is_checked_once_for_the_last_version(client: LanguageClient, project: Path) -> None:
    import asyncio

    spec = project / "nightly.acx"
    text = spec.read_text()
    uri = _open(client, spec, text)
    assert await _diagnostics(client, uri, 1) == []
    for version in (2, 3, 4):
        edited = text.replace("task_concurrency = 8", f"task_concurrency = {'x' * version}")
        client.text_document_did_change(
            T.DidChangeTextDocumentParams(
                text_document=T.VersionedTextDocumentIdentifier(uri=uri, version=version),
                content_changes=[T.TextDocumentContentChangeWholeDocument(text=edited)],
            )
        )
    params = await asyncio.wait_for(client.wait_for_notification(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 60)
    assert params.version == 4  # versions 2 and 3 were superseded within the debounce window
    assert [d.code for d in params.diagnostics] == ["E0125"]  # `xxxx` is an undefined name
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(client.wait_for_notification(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 0.6)


def test_without_pygls_acx_lsp_says_what_to_install() -> None:
    code = "import sys; sys.modules['pygls'] = None; from acx.cli import main; sys.exit(main(['lsp']))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60)
    assert out.returncode == 2
    assert "E0670" in out.stderr and "pip install 'acx-eval[lsp]'" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.asyncio
async def test_editing_an_open_import_rechecks_the_files_that_import_it(client: LanguageClient, project: Path) -> None:
    common = project / "common.acx"
    common_uri = _open(client, common)
    assert await _diagnostics(client, common_uri, 1) == []
    spec = project / "nightly.acx"
    uri = _open(client, spec)
    assert await _diagnostics(client, uri, 1) == []
    renamed = common.read_text().replace("let qa_dataset", "let qa_data")  # unsaved
    client.text_document_did_change(
        T.DidChangeTextDocumentParams(
            text_document=T.VersionedTextDocumentIdentifier(uri=common_uri, version=2),
            content_changes=[T.TextDocumentContentChangeWholeDocument(text=renamed)],
        )
    )
    # nightly.acx itself did not change. Its publish follows common.acx's at once, faster than a
    # new wait_for_notification can be armed, so read the client's own record of the latest
    # diagnostics per document (kept for every publish) instead of waiting for the notification.
    got = await _latest(client, uri, lambda ds: bool(ds))
    assert [d.code for d in got] == ["E0125"] and "qa_dataset" in got[0].message


async def _latest(client: LanguageClient, uri: str, ready) -> list[T.Diagnostic]:  # type: ignore[no-untyped-def]
    import asyncio

    async def poll() -> list[T.Diagnostic]:
        while not ready(client.diagnostics.get(uri, [])):
            await asyncio.sleep(0.02)
        return list(client.diagnostics[uri])

    return await asyncio.wait_for(poll(), 60)  # a missing publish fails the test, never hangs it


@pytest.mark.asyncio
async def test_a_yaml_spec_is_checked_as_saved_and_says_so(client: LanguageClient, tmp_path: Path) -> None:
    spec = tmp_path / "nightly.yaml"
    shutil.copy(EXAMPLES / "nightly.yaml", spec)
    uri = spec.as_uri()
    client.text_document_did_open(
        T.DidOpenTextDocumentParams(
            text_document=T.TextDocumentItem(uri=uri, language_id="yaml", version=1, text=spec.read_text())
        )
    )
    got = await _diagnostics(client, uri, 1)
    assert [(d.code, d.severity) for d in got] == [("W0308", T.DiagnosticSeverity.Warning)]


@pytest.mark.asyncio
async def test_rename_of_something_that_is_not_a_let_is_refused(client: LanguageClient, project: Path) -> None:
    from pygls.exceptions import JsonRpcException

    path = project / "nightly.acx"
    text = path.read_text()
    uri = _open(client, path, text)
    with pytest.raises(JsonRpcException, match="E0671"):
        await client.text_document_rename_async(
            T.RenameParams(
                text_document=T.TextDocumentIdentifier(uri=uri), position=_pos(text, "task_conc"), new_name="x"
            )
        )
