"""Many processes on one key, and SIGKILL at random points of a compile and
publish. Sizes (defaults are CI-sized; the report runs use more):
  KILN_STRESS_PROCS (16), KILN_STRESS_ROUNDS (3), KILN_STRESS_KILLS (20),
  KILN_STRESS_MB (size of the kill-test model's weights, 16).
Each test prints its figures (pytest -s shows them)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from cachehelp import entries, kiln_env, launch_together, leftovers
from conftest import MLP_Y, big_model

PROCS = int(os.environ.get("KILN_STRESS_PROCS", "16"))
ROUNDS = int(os.environ.get("KILN_STRESS_ROUNDS", "3"))
KILLS = int(os.environ.get("KILN_STRESS_KILLS", "20"))
MB = int(os.environ.get("KILN_STRESS_MB", "16"))


def test_processes_starting_together_compile_once(kiln, mlp_onnx, mlp_x, demo_onnx, tmp_path):
    """PROCS processes start at the same instant on the same model and key,
    ROUNDS times (the entry is cleared between rounds): one compiles, the
    others wait and load; every output is right; the cache verifies."""
    cache = tmp_path / "cache"
    env = kiln_env({"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    # demo.onnx: the reference output comes from a run without the cache.
    img = tmp_path / "image.npy"
    np.save(img, np.random.default_rng(3).random((1, 3, 64, 64), dtype=np.float32))
    ref_dir = tmp_path / "ref"
    ref = kiln("run", demo_onnx, "--input", f"image={img}", "--no-cache", "--output-dir", ref_dir)
    assert ref.rc == 0, ref.describe()
    demo_ref = np.load(ref_dir / "probs.npy")

    compiles = waits = checked = 0
    for model, x_arg, expect in [(mlp_onnx, f"x={mlp_x}", None), (demo_onnx, f"image={img}", demo_ref)]:
        for r in range(ROUNDS):
            clear = kiln("cache", "clear", "--cache-dir", cache)
            assert clear.rc == 0, clear.describe()
            outs = [tmp_path / f"out-{model.stem}-{r}-{i}" for i in range(PROCS)]
            args = [["run", str(model), "--input", x_arg, "--cache-dir", str(cache), "--output-dir", str(o), "--json"]
                    for o in outs]
            results = launch_together(kiln.binary, args, env, tmp_path)
            for res, out in zip(results, outs):
                assert res["rc"] == 0 and res["json"], res["stderr"]
                if expect is None:
                    np.testing.assert_allclose(np.load(out / "y.npy"), MLP_Y, atol=1e-6)
                else:
                    np.testing.assert_array_equal(np.load(out / next(iter(os.listdir(out)))), expect)
                checked += 1
            kinds = [res["json"]["cache"] for res in results]
            round_compiles = kinds.count("miss")
            compiles += round_compiles
            waits += sum("waiting for another process" in res["stderr"] for res in results)
            assert round_compiles == 1 and kinds.count("hit") == PROCS - 1, kinds
            ver = kiln("cache", "verify", "--cache-dir", cache, "--json")
            assert ver.rc == 0 and ver.json()["ok"] == 1 and ver.json()["damaged"] == 0, ver.describe()
            assert leftovers(cache) == [], leftovers(cache)
    rounds = 2 * ROUNDS
    print(f"\nstress: {PROCS} processes x {rounds} rounds (mlp + demo): {compiles} compiles "
          f"(one per round), {waits} processes reported waiting, {checked} outputs checked, cache verified clean")
    assert compiles == rounds


def test_sigkill_at_random_points_leaves_a_consistent_cache(kiln, tmp_path):
    """A compile killed with SIGKILL at KILLS random instants between its
    start and the end of its publish: after each, the cache verifies clean
    (no partial entry), and the next run succeeds with the right output.
    Files left by the killed process are removed by the next gc."""
    model = big_model(tmp_path / "big.onnx", MB)
    n = MB * 1024 * 1024 // 4
    x = np.linspace(-1, 1, n, dtype=np.float32)
    xp = tmp_path / "x.npy"
    np.save(xp, x)
    import onnx
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(model)).graph.initializer}
    want = x * inits["w"] + inits["c"]

    cache = tmp_path / "cache"
    env = kiln_env({"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    cmd = [str(kiln.binary), "run", str(model), "--input", f"x={xp}", "--cache-dir", str(cache), "--json"]
    # How long a whole compile + publish + run takes here: kill points are spread over it.
    t0 = time.monotonic()
    full = subprocess.run(cmd, env=env, capture_output=True, text=True)
    span = time.monotonic() - t0
    assert full.returncode == 0 and json.loads(full.stdout)["cache"] == "miss", full.stderr
    # When does the publish happen? Watch three runs (the last, warm one
    # counts): first the temporary file appears, then the entry.
    for _ in range(3):
        subprocess.run([str(kiln.binary), "cache", "clear", "--cache-dir", str(cache)], env=env, check=True,
                       capture_output=True)
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t_tmp = t_entry = None
        while p.poll() is None and t_entry is None:
            names = os.listdir(cache) if cache.exists() else []
            now = time.monotonic() - t0
            if t_tmp is None and any(".tmp-" in n for n in names):
                t_tmp = now
            if any(n.endswith(".kiln") and not n.startswith(".") for n in names):
                t_entry = now
            time.sleep(0.001)  # a busy poll would slow the watched process on a small machine
        p.wait()
        span = time.monotonic() - t0
    t_tmp = t_tmp if t_tmp is not None else (t_entry or span) * 0.8
    t_entry = t_entry if t_entry is not None else span
    rng = random.Random(11)
    killed = finished = 0
    phases = {"before the lock": 0, "compiling (lock held)": 0, "writing the temporary file": 0,
              "after the publish": 0}
    swept = 0
    for i in range(KILLS):
        subprocess.run([str(kiln.binary), "cache", "clear", "--cache-dir", str(cache)], env=env, check=True,
                       capture_output=True)
        assert entries(cache) == [] and leftovers(cache) == []
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Half the kills anywhere before the publish, half around it.
        time.sleep(rng.uniform(0, t_entry) if i % 2 else rng.uniform(max(0.0, t_tmp - 0.01), t_entry + 0.005))
        p.send_signal(signal.SIGKILL)
        rc = p.wait()
        if rc == -signal.SIGKILL:
            killed += 1
        else:
            finished += 1
        left = leftovers(cache)
        if rc == -signal.SIGKILL:
            phase = ("after the publish" if entries(cache)
                     else "writing the temporary file" if any(".tmp-" in f.name for f in left)
                     else "compiling (lock held)" if left else "before the lock")
            phases[phase] += 1
        ver = subprocess.run([str(kiln.binary), "cache", "verify", "--cache-dir", str(cache), "--json"], env=env,
                             capture_output=True, text=True)
        assert ver.returncode == 0, f"kill {i}: {ver.stdout} {ver.stderr}"
        assert json.loads(ver.stdout)["damaged"] == 0
        assert all(not f.name.endswith(".kiln") or f.name.startswith(".") for f in left)
        # The next gc takes whatever the killed process left.
        gc = subprocess.run([str(kiln.binary), "cache", "gc", "--cache-dir", str(cache), "--json"], env=env,
                            capture_output=True, text=True)
        assert gc.returncode == 0, gc.stderr
        removed = [r for r in json.loads(gc.stdout)["removed"] if r["kind"] in ("temporary", "lock")]
        assert len(removed) == len(left) and leftovers(cache) == [], (removed, left)
        swept += len(removed)
        out = tmp_path / f"out{i % 2}"
        nxt = subprocess.run(cmd + ["--output-dir", str(out)], env=env, capture_output=True, text=True)
        assert nxt.returncode == 0, f"kill {i}: {nxt.stderr}"
        assert json.loads(nxt.stdout)["cache"] in ("hit", "miss")
        np.testing.assert_array_equal(np.load(out / "y.npy"), want)
    print(f"\nkill test: {KILLS} SIGKILLs at random instants of {span * 1000:.0f} ms runs of a {MB} MB model "
          f"(publish seen from {t_tmp * 1000:.0f} to {t_entry * 1000:.0f} ms): "
          f"{killed} killed ({', '.join(f'{n} {k}' for k, n in phases.items())}), {finished} finished first; "
          f"{swept} temporary/lock files left, all removed by the next gc; the cache verified clean and the next "
          f"run succeeded with the right output every time")
    assert killed > 0
