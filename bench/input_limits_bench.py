"""How fast hostile inputs are refused (issue 11 item 8: "report the limit hit, with location, in
well under a second").

Each case is a file that used to take tens of seconds or gigabytes (a YAML alias bomb, `.acx`
let-doubling, string and list bombs, a huge `for` loop, deep nesting, a 3 MB line, a huge
integer); each now ends in exit 2 with a located E0219. The baseline is the dry run of a small
valid spec in the same run, so the printed ratio says what refusing costs over compiling a normal
spec (mostly process start and imports). Fresh processes, warm bytecode, median child CPU time.
``--check`` exits 1 when a refusal costs more than 1 s of CPU or does not exit 2 with E0219.

Usage: ``python bench/input_limits_bench.py [--runs N] [--check]``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

LIMIT_SECONDS = 1.0
HEAD = "version: 1\nname: q\nrequests:\n  - name: q\n"
REQ = (
    "    benchmark: {id: exact_match, dataset: d.jsonl}\n"
    '    harness: {id: command, command: "true"}\n'
    "    environment: {id: host_process}\n"
)
RUN = 'run q {{ benchmark exact_match {{ dataset = "d.jsonl" }} harness command {{ command = "true" }} {extra} }}\n'


def _cases() -> dict[str, tuple[str, str]]:
    """name → (file name, content)."""
    names = "abcdefghij"
    alias = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n" for p, n in itertools.pairwise(names)
    )
    string_bomb = 'let a0 = "xxxxxxxxxx"\n' + "".join(f'let a{i + 1} = "${{a{i}}}${{a{i}}}"\n' for i in range(40))
    list_bomb = 'let a0 = ["x"]\n' + "".join(f"let a{i + 1} = [a{i}, a{i}, a{i}]\n" for i in range(40))
    items = ", ".join(str(i) for i in range(20_000))
    return {
        "valid spec (baseline)": ("ok.yaml", HEAD + REQ),
        "YAML alias bomb (10^10 values)": ("alias.yaml", HEAD + REQ + alias),
        "YAML nesting 5,000 deep": ("deep.yaml", HEAD + REQ + "    metadata: " + "[" * 5000 + "]" * 5000 + "\n"),
        "JSON integer of 5,000 digits": ("int.json", '{"version": 1, "task_concurrency": ' + "9" * 5000 + "}"),
        ".acx string doubling (2^40)": ("string.acx", string_bomb + RUN.format(extra="output { run_name = a40 }")),
        ".acx list tripling (3^40)": ("list.acx", list_bomb + RUN.format(extra="metadata = a40")),
        ".acx for over 20,000 items": (
            "loop.acx",
            f'orchestration q {{ for x in [{items}] {{ run "r${{x}}" {{ }} }} }}\n',
        ),
        ".acx nesting 5,000 deep": ("deep.acx", RUN.format(extra="metadata = " + "[" * 5000 + "]" * 5000)),
        "3 MB line (was a quadratic mask)": ("line.yaml", HEAD + REQ + "    bad: http://a:" + "b" * 3_000_000 + "\n"),
    }


def _run(argv: list[str], cwd: str, env: dict[str, str]) -> tuple[float, int, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, proc.returncode, proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, ".git"))
        env["XDG_CONFIG_HOME"] = os.path.join(tmp, "xdg")
        Path(tmp, "d.jsonl").write_text('{"id": "1", "question": "1+1", "answer": "2"}\n')
        rows = []
        for label, (name, text) in _cases().items():
            Path(tmp, name).write_text(text)
            argv = [sys.executable, "-m", "acx", "compile", name, "--dry-run"]
            _run(argv, tmp, env)  # warm-up (bytecode, caches)
            cpus, codes, errs = [], set(), ""
            for _ in range(args.runs):
                cpu, code, errs = _run(argv, tmp, env)
                cpus.append(cpu)
                codes.add(code)
            rows.append((label, statistics.median(cpus), codes, errs))
    baseline = rows[0][1]
    print(f"{'input':36} {'cpu median':>10} {'vs valid':>9}  result")
    for label, cpu, codes, errs in rows:
        first = errs.splitlines()[0] if errs else ""
        refused = codes == {2} and "error[E0219]" in errs
        verdict = "baseline" if label.endswith("(baseline)") else ("ok" if refused and cpu < LIMIT_SECONDS else "FAIL")
        ok = ok and verdict != "FAIL"
        print(f"{label:36} {cpu:10.3f} {cpu / baseline:8.2f}x  {verdict}  {first[:90]}")
    return 0 if ok or not args.check else 1


if __name__ == "__main__":
    raise SystemExit(main())
