"""Safe extraction of untrusted tar streams (pure; no engine needed).  # contract A4"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acx.drivers.docker._archive import read_single_file, safe_extract, single_file_tar
from acx.drivers.transfer import ArchiveLimitError, UnsafeArchiveError, is_excluded

pytestmark = pytest.mark.no_engine


def _tar(*members: tuple[str, str, bytes | str]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                assert isinstance(payload, bytes)
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
                continue
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, str(payload)
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, str(payload)
            elif kind == "chr":
                info.type = tarfile.CHRTYPE
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            tar.addfile(info)
    buf.seek(0)
    return buf


def test_extracts_tree_and_strips_top(tmp_path: Path) -> None:
    # contract A4
    tar = _tar(("out", "dir", b""), ("out/a.txt", "file", b"A"), ("out/.h", "file", b"H"), ("out/l", "sym", "a.txt"))
    stats = safe_extract(tar, tmp_path / "d", strip_top=True)
    assert (tmp_path / "d/a.txt").read_bytes() == b"A" and (tmp_path / "d/.h").read_bytes() == b"H"
    assert (tmp_path / "d/l").is_symlink() and stats.files == 2 and stats.links == 1


@pytest.mark.parametrize(
    "members",
    [
        [("out/../../evil", "file", b"x")],
        [("/etc/evil", "file", b"x")],
        [("out/l", "sym", "/etc/passwd")],
        [("out/l", "sym", "../../outside")],
        [("out/h", "hard", "../outside")],
        [("out/dev", "chr", b"")],
        [("out/fifo", "fifo", b"")],
    ],
    ids=["dotdot", "absolute", "abs-symlink", "escaping-symlink", "escaping-hardlink", "device", "fifo"],
)
def test_refuses_unsafe_members(tmp_path: Path, members: list[tuple[str, str, bytes | str]]) -> None:
    # contract A4: path or link escapes and special files are errors
    with pytest.raises(UnsafeArchiveError):
        safe_extract(_tar(*members), tmp_path / "d", strip_top=True)
    assert not (tmp_path / "evil").exists() and not (tmp_path / "outside").exists()


def test_refuses_writing_through_symlink(tmp_path: Path) -> None:
    # contract A4: a member under an inside symlink that points back out is refused
    (tmp_path / "secret").mkdir()
    tar = _tar(("out/sub", "sym", "x/../.."), ("out/sub/p", "file", b"x"))
    with pytest.raises(UnsafeArchiveError):
        safe_extract(tar, tmp_path / "d", strip_top=True)


def test_limits(tmp_path: Path) -> None:
    # contract A7: artifact_limits bytes and entries
    with pytest.raises(ArchiveLimitError):
        safe_extract(_tar(("o/a", "file", b"x" * 100)), tmp_path / "a", strip_top=True, max_bytes=99)
    many = [(f"o/f{i}", "file", b"") for i in range(5)]
    with pytest.raises(ArchiveLimitError):
        safe_extract(_tar(*many), tmp_path / "b", strip_top=True, max_entries=4)


def test_excludes_follow_gnu_tar(tmp_path: Path) -> None:
    # contract A4: exclude uses GNU tar patterns (unanchored, a directory excludes its tree)
    tar = _tar(("o/keep.py", "file", b"k"), ("o/x.tmp", "file", b"t"), ("o/cache/deep/f", "file", b"c"))
    stats = safe_extract(tar, tmp_path / "d", strip_top=True, exclude=["*.tmp", "cache"])
    assert sorted(p.name for p in (tmp_path / "d").rglob("*")) == ["keep.py"]
    assert "x.tmp" in stats.excluded


@given(st.lists(st.sampled_from(["a", "b", "..", ".", "c.tmp"]), min_size=1, max_size=5))
def test_is_excluded_never_crashes_and_matches_basename(parts: list[str]) -> None:
    # contract A4
    rel = "/".join(parts)
    assert is_excluded(rel, ["*.tmp"]) == any(p.endswith(".tmp") for p in parts)


def test_single_file_roundtrip() -> None:
    data = bytes(range(256))
    content, mode = read_single_file(io.BytesIO(single_file_tar("x/y.bin", data, 0o755)))
    assert content == data and mode == 0o755


_COMPONENT = st.sampled_from(["a", "b", "..", ".", "", "c.txt"])


@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.lists(_COMPONENT, min_size=1, max_size=4),
            st.sampled_from(["file", "sym", "hard", "dir"]),
            st.lists(_COMPONENT, min_size=1, max_size=3),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_nothing_ever_lands_outside(tmp_path_factory: pytest.TempPathFactory, members: list) -> None:
    # contract A4 (property): whatever the member names and link targets, extraction either refuses
    # the archive or every path it wrote resolves inside the destination
    base = tmp_path_factory.mktemp("prop")
    dest = base / "dest"
    spec = []
    for absolute, parts, kind, target in members:
        name = ("/" if absolute else "") + "top/" + "/".join(parts)
        link = ("/" if absolute else "") + "/".join(target)
        spec.append((name, kind, b"x" if kind in ("file", "dir") else link))
    try:
        safe_extract(_tar(*spec), dest, strip_top=True)
    except (UnsafeArchiveError, OSError):  # refused, or failed safely (e.g. ELOOP on a link loop)
        pass
    outside = [p for p in base.rglob("*") if not str(p).startswith(str(dest))]
    assert outside == []
    real_dest = os.path.realpath(dest)
    for p in dest.rglob("*") if dest.exists() else []:
        if p.is_symlink():
            lexical = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
            assert lexical.startswith(str(dest)), (p, os.readlink(p))
            if os.path.exists(p):  # (a loop never resolves: harmless, and realpath() misreports it)
                assert os.path.realpath(p).startswith(real_dest), p


@pytest.mark.parametrize(
    "members",
    [
        # `self -> .` is harmless alone; `self/..` is the root's parent on disk, not `.` as text says.
        [("out/self", "sym", "."), ("out/up", "sym", "self/..")],
        # A deep chain: x is a link two levels up, so `x/../..` climbs out although text says inside.
        [("out/d/e", "dir", b""), ("out/d/e/x", "sym", "../.."), ("out/d/e/esc", "sym", "x/../../etc/hostname")],
        # The link's own name passes through a link: `self/c -> ../x` is really at the root.
        [("out/self", "sym", "."), ("out/self/c", "sym", "../x")],
    ],
)
def test_symlink_chains_that_lead_out_are_refused(tmp_path: Path, members: list[tuple[str, str, str]]) -> None:
    # contract A4: escapes are judged where the filesystem resolves them, not by the text
    with pytest.raises(UnsafeArchiveError):
        safe_extract(_tar(("out", "dir", b""), *members), tmp_path / "d", strip_top=True)


def test_ordinary_relative_links_stay_allowed(tmp_path: Path) -> None:
    tar = _tar(
        ("out", "dir", b""),
        ("out/sub", "dir", b""),
        ("out/sub/f", "file", b"F"),
        ("out/sub/up", "sym", "../sub/f"),
        ("out/top", "sym", "sub/f"),
        ("out/dot", "sym", "./sub"),
    )
    stats = safe_extract(tar, tmp_path / "d", strip_top=True)
    assert stats.links == 3 and (tmp_path / "d/sub/up").read_bytes() == b"F"


def test_a_single_file_tar_is_dated_now(tmp_path: Path) -> None:
    import time

    before = int(time.time())
    safe_extract(io.BytesIO(single_file_tar("f.bin", b"x")), tmp_path / "d", strip_top=False)
    assert (tmp_path / "d" / "f.bin").read_bytes() == b"x"
    with tarfile.open(fileobj=io.BytesIO(single_file_tar("f.bin", b"x"))) as tar:
        assert tar.getmembers()[0].mtime >= before
