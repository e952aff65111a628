#!/usr/bin/env python3
"""Stand-ins of the shipped agent CLIs (tests only), installed under their names (mini, claude,
codex, aider, openhands). Each refuses a command line without the non-interactive flags its
definition passes, reads the model from the variables the real CLI reads, speaks that CLI's
protocol (chat completions, Anthropic messages, Responses) and writes the log its definition
collects. The loop is the same for all: the model answers with one ```bash``` block per turn, the
stand-in runs it and sends back the output; a reply without a block ends the episode."""

import json
import os
import re
import subprocess
import sys
import urllib.request

NAME = os.path.basename(sys.argv[0])
ARGS = sys.argv[1:]


def need(flag):
    if flag not in ARGS:
        sys.exit(f"{NAME}: the definition did not pass {flag}")


def val(flag):
    need(flag)
    return ARGS[ARGS.index(flag) + 1]


def read(path):
    with open(path) as f:
        return f.read()


def post(url, body, headers):
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json", **headers}
    )
    return json.loads(urllib.request.urlopen(req, timeout=60).read())


def call(proto, base, key, model, messages):
    if proto == "chat":
        r = post(base + "/chat/completions", {"model": model, "messages": messages}, {"Authorization": "Bearer " + key})
        return r["choices"][0]["message"]["content"]
    if proto == "anthropic":
        body = {"model": model, "max_tokens": 1024, "messages": messages}
        r = post(base + "/v1/messages", body, {"x-api-key": key, "anthropic-version": "2023-06-01"})
        return "".join(c.get("text", "") for c in r["content"] if c.get("type") == "text")
    r = post(base + "/responses", {"model": model, "input": messages}, {"Authorization": "Bearer " + key})
    return "".join(
        c.get("text", "")
        for o in r["output"]
        if o.get("type") == "message"
        for c in o["content"]
        if c.get("type") == "output_text"
    )


env = os.environ
log = None
if NAME == "mini":
    need("-y"), need("--exit-immediately")
    model, task, log = val("-m").split("/", 1)[1], val("-t"), val("-o")
    assert env["MSWEA_CONFIGURED"] == "true"
    proto, base, key = "chat", env["OPENAI_API_BASE"], env["OPENAI_API_KEY"]
elif NAME == "claude":
    task, model = val("-p"), val("--model")
    need("--dangerously-skip-permissions"), need("--verbose")
    assert val("--output-format") == "stream-json" and env["DISABLE_AUTOUPDATER"] == "1"
    proto, base, key = "anthropic", env["ANTHROPIC_BASE_URL"], env["ANTHROPIC_API_KEY"]
elif NAME == "codex":
    assert ARGS[0] == "exec" and val("--sandbox") == "danger-full-access"
    need("--skip-git-repo-check"), need("--json")
    model, log, task = val("-m"), val("-o"), ARGS[-1]
    # As the real CLI (0.171): CODEX_HOME must exist; OPENAI_BASE_URL is ignored, the provider
    # comes from -c overrides (TOML values) and its key from the variable its env_key names.
    if not os.path.isdir(env["CODEX_HOME"]):
        sys.exit(f"Error finding codex home: CODEX_HOME points to {env['CODEX_HOME']!r}, but that path does not exist")
    conf = {}
    for i, a in enumerate(ARGS[:-1]):
        if a == "-c":
            k, _, v = ARGS[i + 1].partition("=")
            conf[k] = v.strip('"')
    provider = conf["model_provider"]
    assert conf[f"model_providers.{provider}.supports_websockets"] == "false"
    proto = "responses"
    base, key = conf[f"model_providers.{provider}.base_url"], env[conf[f"model_providers.{provider}.env_key"]]
elif NAME == "aider":
    need("--yes-always"), need("--no-git")
    task, model, log = read(val("--message-file")), val("--model").split("/", 1)[1], val("--chat-history-file")
    with open(val("--llm-history-file"), "w") as f:
        f.write(f"model {model} at {env['OPENAI_API_BASE']}\n")
    proto, base, key = "chat", env["OPENAI_API_BASE"], env["OPENAI_API_KEY"]
elif NAME == "openhands":
    need("--headless"), need("--override-with-envs"), need("--json")
    task, model = read(val("-f")), env["LLM_MODEL"].split("/", 1)[1]
    proto, base, key = "chat", env["LLM_BASE_URL"], env["LLM_API_KEY"]
else:
    sys.exit(f"unknown stand-in {NAME}")

messages = [{"role": "user", "content": task}]
for _ in range(10):
    reply = call(proto, base, key, model, messages)
    messages.append({"role": "assistant", "content": reply})
    print(json.dumps({"type": "assistant", "agent": NAME, "text": reply}), flush=True)
    m = re.search(r"```bash\n(.*?)```", reply, re.S)
    if not m:
        break
    out = subprocess.run(["bash", "-c", m.group(1)], capture_output=True, text=True, timeout=60)
    messages.append({"role": "user", "content": f"returncode {out.returncode}\n{out.stdout}{out.stderr}"})
# The answer where the real CLI leaves it (the shapes of mini-swe-agent 2.4's trajectory, Claude
# Code 2.1's last stream-json event, codex's -o file, aider's chat history).
final = messages[-1]["content"]
if NAME == "claude":
    print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": final}), flush=True)
if NAME == "openhands":  # OpenHands 1.16's --json event for a plain reply, and its conversation store
    event = {"kind": "MessageEvent", "source": "agent", "llm_message": {"content": [{"type": "text", "text": final}]}}
    print(json.dumps(event), flush=True)
    events = os.path.join(env["OPENHANDS_CONVERSATIONS_DIR"], "standin", "events")
    os.makedirs(events, exist_ok=True)
    with open(os.path.join(events, "event-00000.json"), "w") as f:
        f.write(json.dumps(event))
if log:
    with open(log, "w") as f:
        if NAME == "mini":
            doc = {"info": {"exit_status": "Submitted", "submission": final}, "messages": messages}
            f.write(json.dumps({"agent": NAME, **doc}))
        elif NAME == "codex":
            f.write(final)
        elif NAME == "aider":  # aider 0.86's chat history: "#### " message lines, the reply, Tokens
            quoted = "".join(f"#### {line}  \n" for line in task.splitlines())
            f.write(f"\n# aider chat started\n\n{quoted}\n{final}\n\n> Tokens: 1 sent, 1 received.  \n")
        else:
            f.write(json.dumps({"agent": NAME, "messages": messages}))
