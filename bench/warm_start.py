#!/usr/bin/env python3
"""Warm start of the cuda target: time from spawning a fresh `kiln run`
process on a model whose artifact is already in the cache to its first
result, with the phases kiln's own debug log gives (issue #20, build item 4).

    warm_start.py --kiln build/tools/kiln/kiln --model resnet50.onnx \
        --input input=img.npy --reps 10 \
        --variant new= --variant old=KILN_CUDA_PRELOAD_BLASLT=early

Each variant is a name and the environment it sets (comma-separated
NAME=VALUE pairs; empty: kiln's defaults). The model is compiled once into a
fresh cache (--cache), one untimed process loads it (page cache warm for
every variant alike), then each round spawns one process of every variant,
in an order that rotates from round to round. A process's first result is
when the first byte of its `--json` answer reaches this script, measured
from just before the spawn (perf_counter), so the spawn itself, the dynamic
linking and everything kiln does is in it. --floor N first spawns N Python
processes that only create the CUDA context (cuInit, then the primary
context) through ctypes: what no kiln change can remove; with --floor-blaslt
they then open cuBLASLt and run its first fp16 matmul (heuristic, two runs):
what any program using cuBLASLt pays on top.

A variant named in --own-cache compiles its own artifact into a cache of its
own (under --cache), with its environment: for switches that change what is
compiled (KILN_CUDA_POINTWISE=cudnn), which are not part of the cache key.
--perf N then runs `kiln perf` once per variant (its environment, N timed
runs at batch 1 after N/10 warm-up runs; perf compiles the model itself), so
the steady-state latency each variant costs is in the same report.

Writes --out (Markdown: the command, the machine, every process, the medians
of the phases, the perf latencies) and --json (every record).
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

# kiln's debug lines -> named phases (ms). Each pattern's groups, in order.
PHASES = [
    (r"cuda: prewarm: cuInit ([\d.]+) ms, primary context ([\d.]+) ms \(ready (\d+) ms after the process started\), "
     r"cuBLASLt / cuDNN handles ([\d.]+) ms", ["cuinit", "primary_ctx", "ctx_ready_at", "handles"]),
    (r"cuBLASLt opened in ([\d.]+) ms on the preload thread \((\d+) ms after", ["blaslt_open", "blaslt_open_at"]),
    (r"session for '.*' starts (\d+) ms after", ["session_at"]),
    (r"model digest and cache key ready (\d+) ms after", ["key_at"]),
    (r"the first cublasLtMatmulAlgoCheck took ([\d.]+) ms", ["first_algo_check"]),
    (r"plans: kernels [\d.]+ ms, cuBLASLt ([\d.]+) ms \(first ([\d.]+)\), cuDNN ([\d.]+) ms \(first ([\d.]+)\)",
     ["blaslt_plans", "blaslt_first", "cudnn_plans", "cudnn_first"]),
    (r"load phases \(ms\): CUDA context ([\d.]+), module ([\d.]+), constants allocated ([\d.]+), cuBLASLt/cuDNN handles "
     r"([\d.]+), plans ([\d.]+), constants upload wait ([\d.]+), graph ([\d.]+)",
     ["wait_ctx", "module", "const_alloc", "handles_load", "plans", "upload_wait", "graph"]),
    (r"cache hit: loaded in ([\d.]+) ms, ready (\d+) ms after", ["load", "ready_at"]),
    (r"cuBLASLt: (\d+) matmul plan\(s\), handle created (yes|no), library in the process (yes|no); (\d+) cuDNN",
     ["blaslt_plans_n", "blaslt_handle", "blaslt_mapped", "cudnn_lt_engines"]),
    (r"(\d+) cuDNN libraries opened in ([\d.]+) ms on the preload thread \((\d+) ms after",
     ["cudnn_libs", "cudnn_preload", "cudnn_preload_at"]),
]
YES_NO = {"yes": 1.0, "no": 0.0}

FLOOR_CHILD = r"""
import ctypes, time, sys
c_u64, c_i64, vp, byref = ctypes.c_uint64, ctypes.c_int64, ctypes.c_void_p, ctypes.byref
t = [time.perf_counter()]
def mark():
    t.append(time.perf_counter())
cu = ctypes.CDLL("libcuda.so.1"); mark()
assert cu.cuInit(0) == 0; mark()
dev = ctypes.c_int(); ctx = vp()
assert cu.cuDeviceGet(byref(dev), 0) == 0
assert cu.cuDevicePrimaryCtxRetain(byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0; mark()
if len(sys.argv) > 1:  # cuBLASLt's first use: an fp16 matmul 256 x 256 x 256, as kiln's plans use it
    lt = ctypes.CDLL(sys.argv[1]); mark()
    h = vp(); assert lt.cublasLtCreate(byref(h)) == 0; mark()
    op = vp(); assert lt.cublasLtMatmulDescCreate(byref(op), 68, 0) == 0  # CUBLAS_COMPUTE_32F, CUDA_R_32F scale
    lay = []
    for _ in range(4):
        l = vp(); assert lt.cublasLtMatrixLayoutCreate(byref(l), 2, c_u64(256), c_u64(256), c_i64(256)) == 0
        lay.append(l)
    pref = vp(); assert lt.cublasLtMatmulPreferenceCreate(byref(pref)) == 0
    res = ctypes.create_string_buffer(1024); got = ctypes.c_int()
    assert lt.cublasLtMatmulAlgoGetHeuristic(h, op, lay[0], lay[1], lay[2], lay[3], pref, 1, res, byref(got)) == 0
    assert got.value == 1; mark()
    bufs = []
    for _ in range(3):
        p = c_u64(); assert cu.cuMemAlloc_v2(byref(p), c_u64(256 * 256 * 2)) == 0; bufs.append(p)
    one, zero = ctypes.c_float(1), ctypes.c_float(0)
    for _ in range(2):
        assert lt.cublasLtMatmul(h, op, byref(one), vp(bufs[0].value), lay[0], vp(bufs[1].value), lay[1], byref(zero),
                                 vp(bufs[2].value), lay[2], vp(bufs[2].value), lay[3], res, None, c_u64(0), None) == 0
        assert cu.cuCtxSynchronize() == 0; mark()
print(" ".join("%.2f" % ((b - a) * 1e3) for a, b in zip(t, t[1:])), flush=True)
"""
FLOOR_FIELDS = ["dlopen_cuda_ms", "cuinit_ms", "primary_ctx_ms", "blaslt_open_ms", "blaslt_create_ms",
                "blaslt_first_heuristic_ms", "first_matmul_ms", "second_matmul_ms"]


def parse_env(spec):
    env = {}
    for pair in filter(None, spec.split(",")):
        k, _, v = pair.partition("=")
        if not k or not _:
            sys.exit(f"--variant: '{pair}' is not NAME=VALUE")
        env[k] = v
    return env


def spawn_timed(cmd, env):
    """(ms from spawn to the first stdout byte, ms to exit, stdout, stderr, rc)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, bufsize=0)  # unbuffered: read(1) takes one byte
    first = p.stdout.read(1)
    t1 = time.perf_counter()
    rest, err = p.communicate()
    t2 = time.perf_counter()
    return (t1 - t0) * 1e3, (t2 - t0) * 1e3, (first + rest).decode(errors="replace"), err.decode(errors="replace"), p.returncode


def phases(stderr):
    out = {}
    for line in stderr.splitlines():
        for pat, names in PHASES:
            m = re.search(pat, line)
            if m:
                for n, g in zip(names, m.groups()):
                    out.setdefault(n, YES_NO[g] if g in YES_NO else float(g))
    return out


def floor_probe(n, blaslt):
    """n processes that create the CUDA context (and, with `blaslt`, the path
    of libcublasLt, then run its first fp16 matmul twice): the phases' ms."""
    rows = []
    for _ in range(n):
        first, _, out, err, rc = spawn_timed([sys.executable, "-c", FLOOR_CHILD] + ([blaslt] if blaslt else []),
                                             dict(os.environ))
        if rc != 0:
            return [{"error": err.strip().splitlines()[-1] if err.strip() else f"rc {rc}"}]
        row = dict(zip(FLOOR_FIELDS, (float(x) for x in out.split())))
        row["spawn_to_output_ms"] = first
        rows.append(row)
    return rows


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=0):
    return "-" if x is None else f"{x:.{nd}f}"


def machine():
    info = {"uname_r": platform.release(), "host_cpus": os.cpu_count()}
    try:
        info["gpu"] = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,persistence_mode", "--format=csv,noheader"],
                                     capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        info["gpu"] = f"nvidia-smi: {e}"
    return info


def report(args, info, floor, records, perf=None):
    goal = args.goal_ms
    lines = [f"# Warm start: `kiln run` on a cached artifact, {args.reps} fresh processes per variant", "",
             "Command: `" + " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]) + "`", "",
             f"Machine: {info['gpu']}; kernel `{info['uname_r']}`; {info['host_cpus']} CPUs.", "",
             f"First result: from just before the parent spawns the process to the first byte of its JSON answer "
             f"(perf_counter in the parent). Goal: <= {goal:.0f} ms in 9 of 10.", ""]
    if floor:
        if "error" in floor[0]:
            lines += [f"Floor probe failed: {floor[0]['error']}", ""]
        else:
            lines += ["## Floor: a Python process that creates the CUDA context, then uses cuBLASLt (ctypes)", "",
                      "| | median | min | max |", "|---|---|---|---|"]
            for k in [f for f in FLOOR_FIELDS if f in floor[0]] + ["spawn_to_output_ms"]:
                v = [r[k] for r in floor]
                lines.append(f"| {k} | {fmt(med(v), 1)} | {fmt(min(v), 1)} | {fmt(max(v), 1)} |")
            lines.append("")
    lines += ["## First result per variant (ms)", "",
              f"| variant | env | median | min | max | <= {goal:.0f} ms | every process |", "|---|---|---|---|---|---|---|"]
    names = list(dict.fromkeys(r["variant"] for r in records))
    for v in names:
        rs = [r for r in records if r["variant"] == v]
        ok = [r["first_result_ms"] for r in rs if r["rc"] == 0]
        lines.append(f"| {v} | `{rs[0]['env'] or 'defaults'}` | {fmt(med(ok))} | {fmt(min(ok) if ok else None)} | "
                     f"{fmt(max(ok) if ok else None)} | {sum(x <= goal for x in ok)}/{len(rs)} | "
                     + ", ".join(fmt(r["first_result_ms"]) if r["rc"] == 0 else f"rc {r['rc']}" for r in rs) + " |")
    keys = ["cuinit", "primary_ctx", "ctx_ready_at", "blaslt_open", "blaslt_open_at", "cudnn_preload", "session_at",
            "key_at", "wait_ctx", "handles_load", "first_algo_check", "blaslt_plans", "cudnn_first", "cudnn_plans", "plans",
            "upload_wait", "graph", "load", "ready_at", "since_process_start_ms", "blaslt_handle", "cudnn_lt_engines"]
    lines += ["", "## Phases (medians, ms; `*_at`: ms after the process started, kiln's clock)", "",
              "| variant | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for v in names:
        rs = [r for r in records if r["variant"] == v and r["rc"] == 0]
        lines.append(f"| {v} | " + " | ".join(fmt(med([r["phases"].get(k) for r in rs]), 1) for k in keys) + " |")
    if perf:
        lines += ["", "## Steady state: `kiln perf` at batch 1, one per variant (ms; its own compile)", "",
                  "| variant | latency median (host I/O) | p90 | latency median (device I/O) | load_ms | reload_ms | "
                  "compile_ms | error |", "|---|---|---|---|---|---|---|---|"]
        for v in [n for n in names if n in perf]:
            p = perf[v]
            lines.append(f"| {v} | {fmt(p.get('latency_ms_median'), 3)} | {fmt(p.get('latency_ms_p90'), 3)} | "
                         f"{fmt(p.get('latency_device_io_ms_median'), 3)} | {fmt(p.get('load_ms'), 1)} | "
                         f"{fmt(p.get('reload_ms'), 1)} | {fmt(p.get('compile_ms'), 0)} | {p.get('error', '')} |")
    errors = [r for r in records if r["rc"] != 0]
    if errors:
        lines += ["", "## Failed processes", ""] + [f"- {r['variant']}: rc {r['rc']}: {r['stderr_tail']}" for r in errors]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", action="append", default=[], help="NAME=FILE.npy for kiln run")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--variant", action="append", default=[], help="NAME=ENV,ENV (ENV: VAR=VALUE); default: one, kiln's defaults")
    ap.add_argument("--kiln-for", action="append", default=[], help="VARIANT=PATH: another kiln binary for one variant")
    ap.add_argument("--cache", default="/tmp/kiln_warm_start_cache")
    ap.add_argument("--floor", type=int, default=0, help="processes of the floor probe (the CUDA context alone)")
    ap.add_argument("--floor-blaslt", default="", help="libcublasLt path or soname: the floor probe also times its first matmul")
    ap.add_argument("--own-cache", action="append", default=[],
                    help="VARIANT[:DIR]: compiled with its environment into a cache of its own, <cache>/DIR "
                         "(default DIR: the variant's name; variants naming one DIR share it)")
    ap.add_argument("--perf", type=int, default=0, help="timed runs of one `kiln perf` per variant (0: none)")
    ap.add_argument("--perf-only", action="append", default=[], help="VARIANT: `kiln perf` for these only (default: all)")
    ap.add_argument("--perf-timeout", type=float, default=120, help="seconds for each `kiln perf`")
    ap.add_argument("--goal-ms", type=float, default=300)
    ap.add_argument("--out", help="Markdown report")
    ap.add_argument("--json", help="every record, one JSON list")
    args = ap.parse_args()

    variants = []
    for spec in args.variant or ["defaults="]:
        name, _, env = spec.partition("=")
        variants.append((name, env))
    binaries = dict(s.split("=", 1) for s in args.kiln_for)
    names = [n for n, _ in variants]
    own = {}  # variant -> its cache directory's name
    for spec in args.own_cache:
        v, _, d = spec.partition(":")
        if v not in names:
            sys.exit(f"--own-cache: no variant '{v}'")
        own[v] = d or v
    for v in args.perf_only:
        if v not in names:
            sys.exit(f"--perf-only: no variant '{v}'")

    def cache_of(name):  # XDG_CACHE_HOME of a variant
        return os.path.join(args.cache, own.get(name, "shared"))

    run = ["run", args.model, "--target", args.target, "--json"]
    if args.precision != "fp32":
        run += ["--precision", args.precision]
    for i in args.input:
        run += ["--input", i]
    if not args.input:
        run += ["--random-inputs"]
    subprocess.run(["rm", "-rf", args.cache], check=True)
    # Compile (and warm the page cache) once per binary and cache directory.
    compiled = set()
    for name, env_spec in variants:
        kiln, cache = binaries.get(name, args.kiln), cache_of(name)
        if (kiln, cache) in compiled:
            continue
        compiled.add((kiln, cache))
        env = dict(os.environ, XDG_CACHE_HOME=cache, **(parse_env(env_spec) if name in own else {}))
        _, _, out, err, rc = spawn_timed([kiln] + run, env)
        if rc != 0:
            sys.exit(f"{kiln} ({name}): the first (compiling) run failed, rc {rc}:\n{err[-2000:]}")
        spawn_timed([kiln] + run, env)

    info = machine()
    floor = floor_probe(args.floor, args.floor_blaslt) if args.floor else []
    records = []
    for rep in range(args.reps):
        order = variants[rep % len(variants):] + variants[:rep % len(variants)]
        for name, env_spec in order:
            env = dict(os.environ, XDG_CACHE_HOME=cache_of(name), KILN_LOG="debug", **parse_env(env_spec))
            first, total, out, err, rc = spawn_timed([binaries.get(name, args.kiln)] + run, env)
            rec = {"variant": name, "env": env_spec, "rep": rep, "rc": rc, "first_result_ms": first, "exit_ms": total,
                   "phases": phases(err), "stderr_tail": err.strip().splitlines()[-1] if err.strip() else ""}
            try:
                j = json.loads(out)
                rec["cache"] = j.get("cache")
                rec["phases"]["since_process_start_ms"] = j.get("since_process_start_ms")
                if j.get("cache") != "hit":
                    rec["rc"] = rc or -1
                    rec["stderr_tail"] = f"not a cache hit: {j.get('cache')}"
            except ValueError:
                rec["rc"] = rc or -1
            records.append(rec)
            print(f"{name} rep {rep}: first result {first:.0f} ms, exit {total:.0f} ms, rc {rec['rc']}", flush=True)
    perf = {}
    perf_variants = [(n, e) for n, e in variants if args.perf and (not args.perf_only or n in args.perf_only)]
    for name, env_spec in perf_variants:  # after the processes: a compile's heat does not touch them
        cmd = [binaries.get(name, args.kiln), "perf", args.model, "--target", args.target, "--json",
               "--runs", str(args.perf), "--warmup", str(max(1, args.perf // 10))]
        if args.precision != "fp32":
            cmd += ["--precision", args.precision]
        for i in args.input:
            cmd += ["--input", i]
        env = dict(os.environ, XDG_CACHE_HOME=cache_of(name), **parse_env(env_spec))
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.perf_timeout)
            j = json.loads(p.stdout) if p.returncode == 0 else {}
            perf[name] = {k: j.get(k) for k in ["latency_ms_median", "latency_ms_p90", "latency_device_io_ms_median",
                                                "load_ms", "reload_ms", "compile_ms"]}
            if p.returncode != 0:
                perf[name]["error"] = f"rc {p.returncode}: " + (p.stderr.strip().splitlines() or [""])[-1][:200]
        except (subprocess.TimeoutExpired, ValueError) as e:
            perf[name] = {"error": str(e).splitlines()[0][:200]}
        print(f"{name} perf: {perf[name]}", flush=True)
    text = report(args, info, floor, records, perf)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "floor": floor, "records": records, "perf": perf}, f, indent=1)


if __name__ == "__main__":
    main()
