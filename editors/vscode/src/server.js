"use strict";
// How the language server is started, from the extension's settings. Kept free of the `vscode`
// module so it can be tested with plain Node.

const DEFAULT_PATH = "acx";

/** The command line of the server: `<acx.path> lsp`, spoken over stdio. */
function serverCommand(settings) {
  const configured = settings && typeof settings.path === "string" ? settings.path.trim() : "";
  return { command: configured || DEFAULT_PATH, args: ["lsp"] };
}

/** Whether the server should run at all (`acx.lsp.enabled`, default true). */
function serverEnabled(settings) {
  return !(settings && settings.lspEnabled === false);
}

module.exports = { DEFAULT_PATH, serverCommand, serverEnabled };
