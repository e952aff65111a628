"use strict";
// The acx extension: the grammar and language configuration are declared in package.json; this
// file starts the language server, `<acx.path> lsp` over stdio, for .acx documents, and restarts
// it when its settings change.

const vscode = require("vscode");
const { LanguageClient, TransportKind } = require("vscode-languageclient/node");
const { serverCommand, serverEnabled } = require("./server");

let client;

function readSettings() {
  const config = vscode.workspace.getConfiguration("acx");
  return { path: config.get("path"), lspEnabled: config.get("lsp.enabled") };
}

async function start(output) {
  const settings = readSettings();
  if (!serverEnabled(settings)) {
    output.appendLine("acx.lsp.enabled is false: the language server is not started.");
    return;
  }
  const { command, args } = serverCommand(settings);
  const executable = { command, args, transport: TransportKind.stdio };
  client = new LanguageClient(
    "acx",
    "acx language server",
    { run: executable, debug: executable },
    {
      documentSelector: [{ language: "acx" }],
      outputChannel: output,
      synchronize: { fileEvents: vscode.workspace.createFileSystemWatcher("**/*.acx") },
    },
  );
  try {
    await client.start();
  } catch (err) {
    // A server that never came up (command not found, exits at once): release the client so a
    // settings change starts a fresh one instead of the client retrying forever.
    const failed = client;
    client = undefined;
    await Promise.resolve(failed.dispose()).catch(() => undefined);
    const message = `Could not start the acx language server (\`${command} ${args.join(" ")}\`): ${err.message || err}`;
    output.appendLine(message);
    const choice = await vscode.window.showErrorMessage(
      `${message}. Set "acx.path" to the acx command, or "acx.lsp.enabled" to false.`,
      "Open Settings",
    );
    if (choice === "Open Settings") {
      await vscode.commands.executeCommand("workbench.action.openSettings", "acx.");
    }
  }
}

async function stop() {
  if (client) {
    const running = client;
    client = undefined;
    await running.stop();
  }
}

async function activate(context) {
  const output = vscode.window.createOutputChannel("acx");
  context.subscriptions.push(output);
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration(async (event) => {
      if (event.affectsConfiguration("acx.path") || event.affectsConfiguration("acx.lsp.enabled")) {
        await stop();
        await start(output);
      }
    }),
  );
  await start(output);
}

function deactivate() {
  return stop();
}

module.exports = { activate, deactivate };
