"""The stray-log scan (dm_broker/log/strays.py) on real directories: it looks at names first and
stats only what is a stray, so what it finds must stay exactly what a full walk finds."""

from __future__ import annotations

from pathlib import Path

from dm_broker.log import strays


def make_stray(parent: Path, name: str, sizes: list[int]) -> Path:
    path = parent / name
    path.mkdir()
    for i, size in enumerate(sizes):
        (path / f"{i:020d}.log").write_bytes(b"x" * size)
    return path


def test_finds_every_stray_directory_with_its_bytes_by_name(tmp_path: Path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    for p in range(50):
        (first / f"t-{p}").mkdir()  # live logs are passed over
    make_stray(first, "t-3.abcd-stray", [100, 20])
    make_stray(first, "t-1.abcd-stray", [])
    (first / "t-2.abcd-stray").write_bytes(b"a file, not a log directory")
    make_stray(first, "t-9.ffff-stray", [7]).joinpath("sub-stray").mkdir()  # only files count
    make_stray(second, "u-0.0000-stray", [5])

    found = strays.find([first, tmp_path / "gone", second])

    assert [(s.name, s.path, s.bytes) for s in found] == [
        ("t-1.abcd-stray", first / "t-1.abcd-stray", 0),
        ("t-3.abcd-stray", first / "t-3.abcd-stray", 120),
        ("t-9.ffff-stray", first / "t-9.ffff-stray", 7),
        ("u-0.0000-stray", second / "u-0.0000-stray", 5),
    ]


def test_a_stray_deleted_during_the_scan_is_left_out(tmp_path: Path):
    assert strays.find_in(tmp_path / "t-0.abcd-stray") == []
    (tmp_path / "not-a-dir").write_text("x")
    assert strays.find([tmp_path / "not-a-dir"]) == []


def test_delete_removes_one_stray_and_records_who(tmp_path: Path):
    make_stray(tmp_path, "t-0.abcd-stray", [10])
    make_stray(tmp_path, "t-1.abcd-stray", [10])
    gone = strays.delete([tmp_path], "t-0.abcd-stray", "ops")
    assert gone.bytes == 10 and not gone.path.exists()
    assert [s.name for s in strays.find([tmp_path])] == ["t-1.abcd-stray"]
    audit = (tmp_path / "__dm_meta" / strays.AUDIT).read_text()
    assert "deleted t-0.abcd-stray (10 bytes) by ops" in audit
