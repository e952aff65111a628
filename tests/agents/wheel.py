"""Builds the stand-in agent's wheel (a zip with dist-info) without pip or network."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

HERE = Path(__file__).parent / "standin"
NAME, VERSION = "standin_agent", "0.1.0"


def build_wheel(out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{NAME}-{VERSION}-py3-none-any.whl"
    dist = f"{NAME}-{VERSION}.dist-info"
    files: dict[str, bytes] = {f"{NAME}/{f.name}": f.read_bytes() for f in sorted((HERE / NAME).glob("*.py"))}
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode()
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: acx-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{dist}/entry_points.txt"] = b"[console_scripts]\nmini = standin_agent.__main__:main\n"
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return path


#: An offline install of the wheel for an image without pip: unpack it into a prefix and put a
#: console script for its entry point on PATH (what `pip install --no-index` would do).
INSTALL = (
    "set -e; python3 -m zipfile -e $ACX_AGENT_DIR/wheels/standin_agent-0.1.0-py3-none-any.whl /opt/standin; "
    "printf '#!/bin/sh\\nPYTHONPATH=/opt/standin exec python3 -m standin_agent \"$@\"\\n' > /usr/local/bin/mini; "
    "chmod +x /usr/local/bin/mini; mini --version"
)


#: Installs tests/agents/standin/fake_cli.py (uploaded as $ACX_AGENT_DIR/standin) under the name of
#: every shipped agent's CLI.
FAKE_CLIS_INSTALL = (
    "set -e; chmod +x $ACX_AGENT_DIR/standin/fake_cli.py; "
    "for n in mini claude codex aider openhands; do ln -sf $ACX_AGENT_DIR/standin/fake_cli.py /usr/local/bin/$n; done"
)
