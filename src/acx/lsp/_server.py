"""The protocol layer of ``acx lsp``: pygls over stdio, a thin shell around :mod:`acx.lsp._analysis`.

Diagnostics are debounced per document (a burst of keystrokes costs one check) and computed on
one worker thread; a result whose document changed meanwhile is dropped, so stale diagnostics are
never published. Requests (completion, hover, ...) answer from the current buffer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer

from acx.diagnostics import Diagnostic, Span
from acx.errors import AcxUserError
from acx.lsp import _analysis as A

__all__ = ["build_server", "serve"]

_KINDS = {
    "key": T.CompletionItemKind.Field,
    "block": T.CompletionItemKind.Struct,
    "component": T.CompletionItemKind.Module,
    "enum": T.CompletionItemKind.EnumMember,
    "let": T.CompletionItemKind.Variable,
    "import": T.CompletionItemKind.File,
    "keyword": T.CompletionItemKind.Keyword,
    "value": T.CompletionItemKind.Function,
}
_SYMBOLS = {
    "orchestration": T.SymbolKind.Namespace,
    "run": T.SymbolKind.Object,
    "recipe": T.SymbolKind.Function,
    "let": T.SymbolKind.Variable,
}


def _path(uri: str) -> str:
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def _uri(path: str) -> str:
    from pathlib import Path

    return Path(os.path.abspath(path)).as_uri()


class AcxLanguageServer(LanguageServer):
    def __init__(self, debounce: float) -> None:
        from acx import __version__

        super().__init__("acx", __version__)
        self.debounce = debounce
        self.pending: dict[str, asyncio.Task[None]] = {}
        # Checks run on their own thread, so a completion never waits behind a full check.
        self.checker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="acx-lsp-check")
        self.worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="acx-lsp")

    def open_texts(self) -> dict[str, str]:
        """Every open buffer by path: unsaved text wins over the file on disk, imports included."""
        return {_path(uri): doc.source for uri, doc in self.workspace.text_documents.items()}

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.worker, fn, *args)

    async def check(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.checker, fn, *args)


def _range(doc: Any, loc: A.Location) -> T.Range:
    server = T.Range(T.Position(loc.line, loc.col), T.Position(loc.end_line, loc.end_col))
    return doc.range_to_client_units(server) if doc is not None else server


def _to_lsp(doc: Any, d: Diagnostic) -> T.Diagnostic:
    span = d.span
    assert span is not None  # check_buffer places every diagnostic in the buffer
    loc = A.Location(
        span.file, span.line - 1, span.col - 1, (span.end_line or span.line) - 1, (span.end_col or span.col + 1) - 1
    )
    related = [
        T.DiagnosticRelatedInformation(T.Location(_uri(r.span.file), _range(None, _loc(r.span))), r.message)
        for r in d.related
    ]
    message = d.message + (f"\nhelp: {d.help}" if d.help else "")
    severity = T.DiagnosticSeverity.Warning if d.severity == "warning" else T.DiagnosticSeverity.Error
    return T.Diagnostic(
        range=_range(doc, loc),
        message=message,
        severity=severity,
        code=d.code,
        source="acx",
        related_information=related or None,
    )


def _loc(span: Any) -> A.Location:
    return A.Location(
        span.file, span.line - 1, span.col - 1, (span.end_line or span.line) - 1, (span.end_col or span.col + 1) - 1
    )


def build_server(debounce: float = 0.2) -> AcxLanguageServer:
    server = AcxLanguageServer(debounce)

    def position(uri: str, pos: T.Position) -> tuple[Any, str, str, int, int]:
        doc = server.workspace.get_text_document(uri)
        p = doc.position_codec.position_from_client_units(doc.lines, pos)
        return doc, _path(uri), doc.source, p.line, p.character

    def schedule(uri: str, delay: float) -> None:
        previous = server.pending.pop(uri, None)
        if previous is not None:
            previous.cancel()  # a newer edit supersedes it
        server.pending[uri] = asyncio.get_running_loop().create_task(publish(uri, delay))

    async def publish(uri: str, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        doc = server.workspace.get_text_document(uri)
        version, text, path = doc.version, doc.source, _path(uri)
        if not path.endswith(".acx"):
            diagnostics = [
                Diagnostic(
                    "W0308",
                    "acx lsp checks YAML and JSON specs as saved on disk, not the unsaved buffer",
                    span=Span(path, 1, 1),
                    help="save the file to refresh its diagnostics",
                    severity="warning",
                ),
                *await server.check(_check_saved, path),
            ]
        else:
            diagnostics = await server.check(A.check_buffer, path, text, server.open_texts())
        current = server.workspace.get_text_document(uri)
        if current.version != version or current.source != text:
            return  # stale: a newer edit has its own check scheduled
        server.text_document_publish_diagnostics(
            T.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=[_to_lsp(doc, d) for d in diagnostics])
        )

    @server.feature(T.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: AcxLanguageServer, params: T.DidOpenTextDocumentParams) -> None:
        schedule(params.text_document.uri, 0)

    def dependents(uri: str) -> list[str]:
        """Other open .acx documents that import ``uri`` (their diagnostics depend on its text)."""
        changed = os.path.realpath(_path(uri))
        texts = server.open_texts()
        return [
            other
            for other, doc in server.workspace.text_documents.items()
            if other != uri
            and _path(other).endswith(".acx")
            and changed in A.imported_files(_path(other), doc.source, texts)
        ]

    @server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls: AcxLanguageServer, params: T.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        schedule(uri, ls.debounce)
        for other in await ls.run(dependents, uri):
            schedule(other, ls.debounce)

    @server.feature(T.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls: AcxLanguageServer, params: T.DidSaveTextDocumentParams) -> None:
        schedule(params.text_document.uri, 0)

    @server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    async def did_close(ls: AcxLanguageServer, params: T.DidCloseTextDocumentParams) -> None:
        task = ls.pending.pop(params.text_document.uri, None)
        if task is not None:
            task.cancel()
        ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=params.text_document.uri, diagnostics=[]))

    @server.feature(T.TEXT_DOCUMENT_COMPLETION, T.CompletionOptions(trigger_characters=[" ", '"', "=", "{", "\n"]))
    async def completion(ls: AcxLanguageServer, params: T.CompletionParams) -> T.CompletionList:
        _, path, text, line, col = position(params.text_document.uri, params.position)
        items = await ls.run(A.complete, path, text, line, col, ls.open_texts())
        return T.CompletionList(
            is_incomplete=False,
            items=[
                T.CompletionItem(
                    label=i.label,
                    kind=_KINDS.get(i.kind),
                    detail=i.detail or None,
                    documentation=T.MarkupContent(T.MarkupKind.Markdown, i.documentation) if i.documentation else None,
                    insert_text=i.insert_text,
                    insert_text_format=T.InsertTextFormat.Snippet if i.insert_text else None,
                )
                for i in items
            ],
        )

    @server.feature(T.TEXT_DOCUMENT_HOVER)
    async def hover(ls: AcxLanguageServer, params: T.HoverParams) -> T.Hover | None:
        _, path, text, line, col = position(params.text_document.uri, params.position)
        value = await ls.run(A.hover, path, text, line, col, ls.open_texts(), os.getcwd())
        return T.Hover(T.MarkupContent(T.MarkupKind.Markdown, value)) if value else None

    @server.feature(T.TEXT_DOCUMENT_DEFINITION)
    async def definition(ls: AcxLanguageServer, params: T.DefinitionParams) -> list[T.Location]:
        _, path, text, line, col = position(params.text_document.uri, params.position)
        locs = await ls.run(A.definition, path, text, line, col, ls.open_texts())
        return [T.Location(_uri(loc.path), _range(None, loc)) for loc in locs]

    @server.feature(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    async def symbols(ls: AcxLanguageServer, params: T.DocumentSymbolParams) -> list[T.DocumentSymbol]:
        doc = ls.workspace.get_text_document(params.text_document.uri)
        found = await ls.run(A.document_symbols, _path(doc.uri), doc.source)
        return [
            T.DocumentSymbol(
                name=s.name,
                kind=_SYMBOLS.get(s.kind, T.SymbolKind.Object),
                range=_range(doc, s.location),
                selection_range=_range(doc, s.selection),
            )
            for s in found
        ]

    @server.feature(T.TEXT_DOCUMENT_FORMATTING)
    async def formatting(ls: AcxLanguageServer, params: T.DocumentFormattingParams) -> list[T.TextEdit] | None:
        doc = ls.workspace.get_text_document(params.text_document.uri)
        try:
            formatted = await ls.run(A.format_buffer, _path(doc.uri), doc.source)
        except AcxUserError:
            return None  # the buffer does not parse; its diagnostics say why
        if formatted == doc.source:
            return []
        lines = doc.lines
        end = T.Position(len(lines), 0)
        return [T.TextEdit(T.Range(T.Position(0, 0), end), formatted)]

    @server.feature(T.TEXT_DOCUMENT_RENAME)
    async def rename(ls: AcxLanguageServer, params: T.RenameParams) -> T.WorkspaceEdit:
        _, path, text, line, col = position(params.text_document.uri, params.position)
        try:
            edits = await ls.run(A.rename_let, path, text, line, col, params.new_name, ls.open_texts())
        except AcxUserError as exc:
            from pygls.exceptions import JsonRpcInvalidRequest

            first = exc.diagnostics[0]
            raise JsonRpcInvalidRequest(f"{first.code}: {first.message} ({first.help})") from None
        changes = {}
        for file, file_edits in edits.items():
            other = ls.workspace.text_documents.get(_uri(file))
            changes[_uri(file)] = [T.TextEdit(_range(other, e.location), e.new_text) for e in file_edits]
        return T.WorkspaceEdit(changes=changes)

    return server


def _check_saved(path: str) -> list[Diagnostic]:
    import dataclasses

    from acx.cli import check_file

    return [d if d.span is not None else dataclasses.replace(d, span=Span(path, 1, 1)) for d in check_file(path)]


def serve(debounce_ms: int = 200) -> None:
    """Run the language server on stdin/stdout until the client exits it."""
    build_server(debounce_ms / 1000).start_io()
