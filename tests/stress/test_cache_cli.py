"""`kiln cache ls|verify|gc|clear|explain`, --on-mismatch, --trust-cache-dir,
the waiting note, and every region of a cache entry damaged, through the
command line. Exit codes: 0 ok, 2 usage, 3 incompatible, 7 corrupt."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from cachehelp import entries, leftovers, regions
from clihelp import assert_error
from conftest import MLP_Y


def run_mlp(kiln, mlp_onnx, mlp_x, cache: Path, out: Path, *extra):
    res = kiln("run", mlp_onnx, "--input", f"x={mlp_x}", "--cache-dir", cache, "--output-dir", out, "--json", *extra)
    return res


def check_y(out: Path, res) -> None:
    y = np.load(out / "y.npy")
    assert y.shape == (2, 3), res.describe()
    np.testing.assert_allclose(y, MLP_Y, atol=1e-6, err_msg=res.describe())


# ---- ls / verify / gc / clear ------------------------------------------------------


def test_ls_shows_entries_and_a_hit_updates_last_use(kiln, mlp_onnx, mlp_x, tmp_path):
    cache = tmp_path / "c"
    assert run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o").json()["cache"] == "miss"
    assert run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o", "--shape", "x=2x4").json()["cache"] == "miss"
    ls = kiln("cache", "ls", "--cache-dir", cache, "--json")
    assert ls.rc == 0, ls.describe()
    obj = ls.json()
    assert obj["access"] == "read_write"
    assert len(obj["entries"]) == 2, ls.describe()
    for e in obj["entries"]:
        assert e["model"] == mlp_onnx.name and e["target"] == "cpu" and e["precision"] == "fp32", e
        assert e["bytes"] == Path(e["file"]).stat().st_size
    assert obj["total_bytes"] == sum(e["bytes"] for e in obj["entries"])
    # Make both old, then hit one of them: it becomes the most recent.
    for e in obj["entries"]:
        os.utime(e["file"], (time.time() - 7200, time.time() - 7200))
    hit = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
    assert hit.json()["cache"] == "hit", hit.describe()
    after = kiln("cache", "ls", "--cache-dir", cache, "--json").json()["entries"]
    assert after[0]["file"] == hit.json()["artifact"]  # most recent first
    assert time.time() - Path(after[0]["file"]).stat().st_mtime < 60
    assert time.time() - Path(after[1]["file"]).stat().st_mtime > 7000
    text = kiln("cache", "ls", "--cache-dir", cache)
    assert text.rc == 0 and "2 entries" in text.stdout and mlp_onnx.name in text.stdout, text.describe()


def test_verify_reports_damage_with_exit_7(kiln, mlp_onnx, mlp_x, tmp_path):
    cache = tmp_path / "c"
    run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
    ok = kiln("cache", "verify", "--cache-dir", cache, "--json")
    assert ok.rc == 0 and ok.json()["ok"] == 1 and ok.json()["damaged"] == 0, ok.describe()
    entry = entries(cache)[0]
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0x10
    entry.write_bytes(bytes(data))
    bad = kiln("cache", "verify", "--cache-dir", cache, "--json")
    assert bad.rc == 7, bad.describe()
    assert bad.json()["damaged"] == 1 and "checksum" in bad.json()["entries"][0]["problem"], bad.describe()


def test_gc_evicts_least_recently_used_to_the_cap(kiln, mlp_onnx, mlp_x, tmp_path):
    cache = tmp_path / "c"
    files = []
    for i, shape in enumerate(["1x4", "2x4", "3x4"]):
        res = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o", "--shape", f"x={shape}") if shape == "2x4" else \
            kiln("run", mlp_onnx, "--random-inputs", "--shape", f"x={shape}", "--cache-dir", cache, "--json")
        assert res.rc == 0, res.describe()
        files.append(Path(res.json()["artifact"]))
        os.utime(files[-1], (time.time() - 1000 + i * 100,) * 2)
    sizes = [f.stat().st_size for f in files]
    gc = kiln("cache", "gc", "--cache-dir", cache, "--max-size", str(sizes[1] + sizes[2]), "--json")
    assert gc.rc == 0, gc.describe()
    removed = [r["file"] for r in gc.json()["removed"]]
    assert removed == [str(files[0])], gc.describe()
    assert gc.json()["bytes_after"] == sizes[1] + sizes[2]
    assert not files[0].exists() and files[1].exists() and files[2].exists()
    bad = kiln("cache", "gc", "--cache-dir", cache, "--max-size", "lots")
    assert_error(bad, 2, "--max-size", "lots")


def test_gc_removes_files_left_by_a_killed_process(kiln, mlp_onnx, mlp_x, tmp_path):
    cache = tmp_path / "c"
    res = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
    key = Path(res.json()["artifact"]).stem
    dead = subprocess.run(["true"])  # noqa: S603,S607 - a pid that has exited
    del dead
    p = subprocess.Popen(["true"])
    p.wait()
    tmp = cache / f".{key}.kiln.tmp-{p.pid}-0badf00d"
    tmp.write_bytes(b"partial entry")
    lock = cache / f"{key}.lock"
    lock.write_bytes(b"")
    ls = kiln("cache", "ls", "--cache-dir", cache, "--json").json()
    assert len(ls["entries"]) == 1 and {o["kind"] for o in ls["other_files"]} == {"temporary", "lock"}
    gc = kiln("cache", "gc", "--cache-dir", cache, "--json")
    assert gc.rc == 0, gc.describe()
    assert sorted(r["kind"] for r in gc.json()["removed"]) == ["lock", "temporary"], gc.describe()
    assert not tmp.exists() and not lock.exists() and len(entries(cache)) == 1


def test_ls_and_gc_count_the_ort_ep_partition_models(kiln, mlp_onnx, mlp_x, tmp_path):
    # The kiln ONNX Runtime EP writes each partition it compiles as
    # <cache_dir>/ort-partitions/<identity>.onnx (ort_ep/ep.cpp).
    cache = tmp_path / "c"
    res = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
    entry = Path(res.json()["artifact"])
    parts = cache / "ort-partitions"
    parts.mkdir()
    part = parts / ("ab" * 16 + ".onnx")
    part.write_bytes(b"p" * 5000)
    os.utime(part, (time.time() - 7200,) * 2)  # older than the entry
    ls = kiln("cache", "ls", "--cache-dir", cache, "--json")
    assert ls.rc == 0, ls.describe()
    obj = ls.json()
    assert [o["kind"] for o in obj["other_files"]] == ["partition"], ls.describe()
    assert obj["total_bytes"] == entry.stat().st_size + 5000, ls.describe()
    text = kiln("cache", "ls", "--cache-dir", cache)
    assert "(partition)" in text.stdout and part.name in text.stdout, text.describe()
    gc = kiln("cache", "gc", "--cache-dir", cache, "--max-size", str(entry.stat().st_size), "--json")
    assert gc.rc == 0, gc.describe()
    assert [r["kind"] for r in gc.json()["removed"]] == ["partition"], gc.describe()
    assert gc.json()["bytes_before"] == entry.stat().st_size + 5000 and gc.json()["bytes_after"] == entry.stat().st_size
    assert not part.exists() and entry.exists()


def test_clear_empties_the_cache(kiln, mlp_onnx, mlp_x, tmp_path):
    cache = tmp_path / "c"
    run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
    (cache / "notes.txt").write_text("not kiln's")
    res = kiln("cache", "clear", "--cache-dir", cache, "--json")
    assert res.rc == 0 and len(res.json()["removed"]) == 1, res.describe()
    assert entries(cache) == [] and (cache / "notes.txt").exists()
    again = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
    assert again.json()["cache"] == "miss", again.describe()


# ---- explain --------------------------------------------------------------------------


def test_explain_names_the_differing_fields_and_options(kiln, mlp_onnx, mlp_x, tmp_path):
    cache = tmp_path / "c"
    run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o", "--shape", "x=2x4")
    miss = kiln("cache", "explain", mlp_onnx, "--cache-dir", cache, "--json")
    assert miss.rc == 0, miss.describe()
    obj = miss.json()
    assert obj["status"] == "miss" and obj["entries"] == 1, miss.describe()
    near = obj["nearest"][0]
    assert [d["field"] for d in near["differs"]] == ["options_digest"], miss.describe()
    assert near["options"]["diff"] == {"entry_only": ["shape:x=2x4"], "request_only": []}, miss.describe()
    ref = kiln("cache", "explain", mlp_onnx, "--cache-dir", cache, "--target", "ref", "--shape", "x=2x4", "--json")
    diffs = {d["field"]: d for d in ref.json()["nearest"][0]["differs"]}
    # The ref target calls no kernel library, so library_versions may differ too.
    assert {"target", "options_digest"} <= set(diffs) <= {"target", "options_digest", "library_versions"}, \
        ref.describe()
    assert diffs["target"]["entry"] == "cpu" and diffs["target"]["request"] == "ref"
    hit = kiln("cache", "explain", mlp_onnx, "--cache-dir", cache, "--shape", "x=2x4", "--json")
    assert hit.json()["status"] == "hit" and hit.json()["entry"], hit.describe()
    text = kiln("cache", "explain", mlp_onnx, "--cache-dir", cache)
    assert text.rc == 0 and "miss" in text.stdout and "shape:x=2x4" in text.stdout, text.describe()


# ---- mismatch policy, trust --------------------------------------------------------------


def test_on_mismatch_error_and_recompile(kiln, mlp_onnx, mlp_x, tmp_path):
    cache = tmp_path / "c"
    cpu = Path(run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o").json()["artifact"])
    ref = Path(run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o", "--target", "ref").json()["artifact"])
    shutil.copyfile(ref, cpu)  # the cpu key now holds a ref program
    err = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o", "--on-mismatch", "error")
    assert_error(err, 3, str(cpu), "target", "ref", "cpu")
    ok = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
    assert ok.rc == 0 and ok.json()["cache"] == "miss", ok.describe()
    assert any("does not match" in n and "target" in n for n in ok.json()["notes"]), ok.describe()
    check_y(tmp_path / "o", ok)
    usage = kiln("run", cpu, "--random-inputs", "--on-mismatch", "recompile")
    assert_error(usage, 2, "--on-mismatch", "explicit artifact")
    assert kiln("run", mlp_onnx, "--on-mismatch", "sometimes").rc == 2


def test_world_writable_cache_dir_is_refused_unless_trusted(kiln, mlp_onnx, mlp_x, tmp_path):
    cache = tmp_path / "c"
    cache.mkdir()
    cache.chmod(0o777)
    res = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
    assert res.rc == 0 and res.json()["cache"] == "none", res.describe()
    assert "kiln: note: cache directory" in res.stderr and "--trust-cache-dir" in res.stderr, res.describe()
    assert entries(cache) == []
    check_y(tmp_path / "o", res)
    trusted = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o", "--trust-cache-dir")
    assert trusted.json()["cache"] == "miss", trusted.describe()


def test_default_cache_dir_is_private(kiln, mlp_onnx, mlp_x, tmp_path):
    xdg = tmp_path / "xdg"
    res = kiln("run", mlp_onnx, "--input", f"x={mlp_x}", "--json", env={"XDG_CACHE_HOME": str(xdg)})
    assert res.rc == 0 and res.json()["cache"] == "miss", res.describe()
    assert (xdg / "kiln").stat().st_mode & 0o777 == 0o700
    assert xdg.stat().st_mode & 0o777 == 0o700


# ---- waiting for another process --------------------------------------------------------


def test_a_waiting_process_says_so_on_stderr(kiln, mlp_onnx, mlp_x, tmp_path):
    cache = tmp_path / "c"
    cache.mkdir(mode=0o700)
    key = kiln("cache", "explain", mlp_onnx, "--cache-dir", cache, "--json").json()["key"]
    lock = cache / f"{key}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # "another process is compiling"
    p = subprocess.Popen([str(kiln.binary), "run", str(mlp_onnx), "--input", f"x={mlp_x}", "--cache-dir", str(cache),
                          "--output-dir", str(tmp_path / "o")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    time.sleep(1.0)
    assert p.poll() is None, "kiln did not wait for the lock"
    os.unlink(lock)  # as kiln does when it lets go
    os.close(fd)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "kiln: note: waiting for another process that is compiling this model" in err, err
    assert "cache: miss" in out, out  # nobody published: it compiled itself
    assert leftovers(cache) == []


# ---- damaged entries through the cache ----------------------------------------------------


def damage_cases(data: bytes) -> list[tuple[str, bytes]]:
    """One flipped byte in (the start, middle and end of) every non-empty
    region, and truncations at several points."""
    cases = []
    for name, (off, size) in regions(data).items():
        for where in sorted({off, off + size // 2, off + size - 1}) if size else []:
            b = bytearray(data)
            b[where] ^= 0xA5
            cases.append((f"{name} byte {where}", bytes(b)))
    for cut in [0, 7, 79, 80, regions(data)["compatibility block"][0] + 5, len(data) // 2, len(data) - 1]:
        cases.append((f"truncated to {cut}", data[:cut]))
    return cases


def test_every_damaged_region_is_moved_aside_and_rebuilt(kiln, mlp_onnx, mlp_x, tmp_path):
    cache = tmp_path / "c"
    first = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
    entry = Path(first.json()["artifact"])
    pristine = entry.read_bytes()
    cases = damage_cases(pristine)
    assert len(cases) >= 25
    for what, damaged in cases:
        entry.write_bytes(damaged)
        strict = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o", "--on-mismatch", "error")
        assert strict.rc == 7, f"{what}\n{strict.describe()}"
        assert str(entry) in strict.error_message(), what
        assert entry.read_bytes() == damaged  # refused, left alone
        res = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
        assert res.rc == 0, f"{what}\n{res.describe()}"
        obj = res.json()
        assert obj["cache"] == "miss", f"{what}\n{res.describe()}"
        assert any("is damaged" in n and ".bad" in n for n in obj["notes"]), f"{what}\n{res.describe()}"
        assert Path(str(entry) + ".bad").read_bytes() == damaged, what
        assert entry.read_bytes() == pristine, what  # rebuilt: the same program, byte for byte
        check_y(tmp_path / "o", res)
    assert kiln("cache", "verify", "--cache-dir", cache).rc == 0


def test_bytes_after_an_entry_are_a_torn_append_ignored_with_a_note(kiln, mlp_onnx, mlp_x, tmp_path):
    # Format 5: bytes after the base artifact that are not a whole program
    # block are what a crash during an append leaves; loads ignore them (the
    # programs before them are kept), `kiln inspect` and `cache verify` say so.
    cache = tmp_path / "c"
    first = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
    entry = Path(first.json()["artifact"])
    pristine = entry.read_bytes()
    entry.write_bytes(pristine + b"\x01" + bytes(200))
    for extra in ((), ("--on-mismatch", "error")):
        res = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o", *extra)
        assert res.rc == 0, res.describe()
        obj = res.json()
        assert obj["cache"] == "hit", res.describe()
        assert any("not a complete program block" in n for n in obj["notes"]), res.describe()
        check_y(tmp_path / "o", res)
    info = kiln("inspect", entry, "--json")
    assert info.rc == 0, info.describe()
    assert info.json()["appended"]["programs"] == 0
    assert "201 bytes" in info.json()["appended"]["ignored"]
    ver = kiln("cache", "verify", "--cache-dir", cache, "--json")
    assert ver.rc == 0, ver.describe()
    assert "not a complete program block" in ver.json()["entries"][0]["note"]
    # Trailing zeros are padding, not a torn block.
    entry.write_bytes(pristine + bytes(64))
    res = run_mlp(kiln, mlp_onnx, mlp_x, cache, tmp_path / "o")
    assert res.json()["cache"] == "hit" and res.json()["notes"] == [], res.describe()


def test_check_reads_only_the_header_and_compat_block(kiln, mlp_onnx, tmp_path):
    art = tmp_path / "m.kiln"
    assert kiln("compile", mlp_onnx, "-o", art).rc == 0
    data = bytearray(art.read_bytes())
    off, size = regions(bytes(data))["compatibility block"]
    for i in range(off + size, len(data)):  # every byte after the compat block
        data[i] ^= 0xFF
    art.write_bytes(bytes(data))
    check = kiln("check", art, "--json")
    assert check.rc == 0 and check.json()["runnable"] is True, check.describe()
    run = kiln("run", art, "--random-inputs")
    assert_error(run, 7, art.name)
