#!/usr/bin/env node
// Tokenizes .acx files with the extension's TextMate grammar, exactly as VS Code does
// (vscode-textmate + the Oniguruma WebAssembly build), and prints the result as JSON:
//   {"files": {"<path>": [[{"start": 0, "end": 3, "scopes": ["source.acx", ...]}, ...], ...]}}
// one array of tokens per line. `--check` first compiles every regular expression of the
// grammar (vscode-textmate compiles a rule only when a line reaches it), so a pattern
// Oniguruma rejects fails here even if no input exercises it.
"use strict";

const fs = require("fs");
const path = require("path");
const oniguruma = require("vscode-oniguruma");
const vsctm = require("vscode-textmate");

const GRAMMAR = path.join(__dirname, "..", "syntaxes", "acx.tmLanguage.json");

async function loadOniguruma() {
  const wasm = fs.readFileSync(require.resolve("vscode-oniguruma/release/onig.wasm"));
  await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  return {
    createOnigScanner: (sources) => new oniguruma.OnigScanner(sources),
    createOnigString: (text) => new oniguruma.OnigString(text),
  };
}

function* regexes(node) {
  if (Array.isArray(node)) {
    for (const item of node) yield* regexes(item);
  } else if (node && typeof node === "object") {
    for (const [key, value] of Object.entries(node)) {
      if (["match", "begin", "end", "while"].includes(key) && typeof value === "string") yield value;
      else yield* regexes(value);
    }
  }
}

function checkRegexes(raw) {
  const problems = [];
  for (const source of regexes(raw)) {
    try {
      new oniguruma.OnigScanner([source]).dispose();
    } catch (err) {
      problems.push(`${JSON.stringify(source)}: ${err.message}`);
    }
  }
  return problems;
}

async function main(argv) {
  const check = argv.includes("--check");
  const files = argv.filter((a) => a !== "--check");
  const onigLib = loadOniguruma();
  const raw = JSON.parse(fs.readFileSync(GRAMMAR, "utf8"));
  await onigLib;
  if (check) {
    const problems = checkRegexes(raw);
    if (problems.length) {
      process.stderr.write(`tokenize.js: invalid regular expressions:\n${problems.join("\n")}\n`);
      return 1;
    }
  }
  const registry = new vsctm.Registry({
    onigLib,
    loadGrammar: async (scopeName) =>
      scopeName === raw.scopeName ? vsctm.parseRawGrammar(JSON.stringify(raw), GRAMMAR) : null,
  });
  const grammar = await registry.loadGrammar(raw.scopeName);
  const out = {};
  for (const file of files) {
    const lines = fs.readFileSync(file, "utf8").split(/\r\n|\n/);
    let stack = vsctm.INITIAL;
    out[file] = lines.map((line) => {
      const result = grammar.tokenizeLine(line, stack);
      stack = result.ruleStack;
      return result.tokens.map((t) => ({
        start: t.startIndex,
        end: Math.min(t.endIndex, line.length),
        scopes: t.scopes,
      }));
    });
  }
  process.stdout.write(JSON.stringify({ grammar: raw.scopeName, files: out }) + "\n");
  return 0;
}

// exitCode, not exit(): exit() would cut off a large JSON document still being written to a pipe.
main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`tokenize.js: ${err.stack || err}\n`);
    process.exitCode = 1;
  },
);
