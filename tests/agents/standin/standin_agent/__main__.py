import argparse
import json
import os
import re
import subprocess
import sys
import urllib.request

from standin_agent import __version__

BLOCK = re.compile(r"```bash\n(.*?)```", re.S)


def chat(messages, model):
    base = os.environ["OPENAI_API_BASE"].rstrip("/")
    body = json.dumps({"model": model.split("/", 1)[-1], "messages": messages}).encode()
    req = urllib.request.Request(
        base + "/chat/completions",
        data=body,
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"},
    )
    return json.loads(urllib.request.urlopen(req, timeout=60).read())["choices"][0]["message"]["content"]


def main():
    p = argparse.ArgumentParser(prog="mini")
    p.add_argument("-y", "--yolo", action="store_true")
    p.add_argument("--exit-immediately", action="store_true")
    p.add_argument("-m", "--model", default=os.environ.get("MSWEA_MODEL_NAME", ""))
    p.add_argument("-t", "--task", required=False)
    p.add_argument("-o", "--output")
    p.add_argument("--version", action="store_true")
    a = p.parse_args()
    if a.version:
        print(__version__)
        return 0
    if not (a.yolo and a.exit_immediately):
        print("stand-in supports only non-interactive runs (-y --exit-immediately)", file=sys.stderr)
        return 2
    messages = [{"role": "user", "content": a.task}]
    for _ in range(20):
        reply = chat(messages, a.model)
        messages.append({"role": "assistant", "content": reply})
        m = BLOCK.search(reply)
        if not m:
            break
        out = subprocess.run(["bash", "-c", m.group(1)], capture_output=True, text=True, timeout=60)
        messages.append({"role": "user", "content": f"returncode {out.returncode}\n{out.stdout}{out.stderr}"})
    if a.output:
        os.makedirs(os.path.dirname(a.output), exist_ok=True)
        with open(a.output, "w") as f:
            info = {"agent": "standin", "version": __version__, "exit_status": "Submitted"}
            json.dump({"info": {**info, "submission": messages[-1]["content"]}, "messages": messages}, f)
    print(messages[-1]["content"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
