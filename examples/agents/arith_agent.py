#!/usr/bin/env python3
"""A tiny offline "agent" for the quickstart: answers `What is A <op> B?` questions.

It reads the prompt on stdin (the `command` harness also writes it to prompt.txt) and prints its
answer on stdout. It is deliberately imperfect, so the summary shows a real pass rate: it does
integer division (`7 / 2` → `3`), so the one question with a fractional answer is wrong.
"""

import re
import sys

prompt = sys.stdin.read()
match = re.search(r"(-?\d+)\s*([-+*/])\s*(-?\d+)", prompt)
if match is None:
    print("I don't know")
    sys.exit(0)
a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
if op == "+":
    answer = a + b
elif op == "-":
    answer = a - b
elif op == "*":
    answer = a * b
else:
    answer = a // b  # the deliberate mistake: integer division
print(answer)
