#!/usr/bin/env python3
"""A stream of random-shape requests through kiln's shape buckets and through
ONNX Runtime, with every output compared (issue #7 acceptance).

Usage:
  .venv/bin/python bench/buckets_stream.py bert|roberta|resnet [--count N] [--batch-max B]
      [--seq-max S] [--seed K] [--threads T] [--model PATH] [--stream build/bench/stream/kiln-stream]
      [--cache-dir DIR] [--work DIR] [--atol A] [--rtol R]

Models: the dynamic copies written by bench/make_dynamic.py (default
/tmp/kiln-dyn/bert_base_dyn.onnx, /tmp/kiln-dyn/resnet50_dyn.onnx).

  bert:   requests (batch, sequence) uniform in [1..B] x [1..S]; input_ids
          uniform in [1, 30000), attention_mask all ones over the request's
          own length, token_type_ids zeros. kiln: --dim batch=1..B
          --dim sequence=1..S (power-of-two buckets; batch padded as rows,
          sequence padded with the mask extended by zeros).
  roberta: as bert on the zoo's RoBERTa export (.models/zoo/roberta.onnx,
          tools/models/zoo.py; --model for xlm_roberta): input_ids uniform in
          [3, vocabulary) (never the padding id 1), always --no-flags (its
          dims are batch_size / sequence_length: shape specialization; the
          sequence is padded where the prover bounds its position ids).
  resnet: requests batch uniform in [1..B], input uniform in [0, 1).
          kiln: --dim N=1..B.

kiln side: one process (bench/stream, `kiln-stream`) holding one Session
with an empty cache directory, so every bucket a request needs is compiled
when first used (compile time included in kiln's total); the number of
compilations is reported next to the number of distinct buckets the stream
used. ONNX Runtime side: one InferenceSession (CPU EP, all optimisations,
intra-op threads T), session creation included in its total. Every output of
every request is compared: |kiln - ort| <= atol + rtol |ort| (defaults
1e-4 and 1e-3, as bench/cpu_vs_ort.py).

Prints one JSON object (parameters, load before/after, totals, compile
count, buckets used, worst difference, failures). Asserts nothing but exits
1 when an output differs or the compile count differs from the buckets used.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def pow2_bucket(v: int, hi: int) -> int:
    p = 1
    while p < v:
        p *= 2
    return min(p, hi)


def main() -> int:
    ap = argparse.ArgumentParser(description="shape-bucket request stream: kiln vs ONNX Runtime")
    ap.add_argument("model_kind", choices=["bert", "roberta", "resnet"])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--batch-max", type=int, default=32)
    ap.add_argument("--seq-max", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", default="cpu", help="kiln target (cpu, cuda); ONNX Runtime stays on the CPU")
    ap.add_argument("--model", default=None)
    ap.add_argument("--stream", default="build/bench/stream/kiln-stream")
    ap.add_argument("--cache-dir", default=None, help="default: a fresh temporary directory (cold cache)")
    ap.add_argument("--work", default=None, help="where requests and outputs go (default: a temporary directory)")
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--no-flags", action="store_true",
                    help="give kiln no --dim: shape specialization by default (issue 16); the compile count is then "
                         "reported, not required to equal the buckets used")
    a = ap.parse_args()
    if a.model_kind == "roberta":
        a.no_flags = True
        a.model = a.model or ".models/zoo/roberta.onnx"
        import onnx
        graph = onnx.load(a.model, load_external_data=False).graph
        vocab = next(int(t.dims[0]) for t in graph.initializer if t.name.endswith("word_embeddings.weight"))
        model_inputs = {i.name for i in graph.input}

    import onnxruntime as ort

    rng = np.random.default_rng(a.seed)
    work = Path(a.work or tempfile.mkdtemp(prefix="kiln-stream-"))
    reqs_dir, out_dir = work / "requests", work / "kiln_out"
    shutil.rmtree(work / "requests", ignore_errors=True)
    shutil.rmtree(out_dir, ignore_errors=True)
    reqs_dir.mkdir(parents=True)
    cache = Path(a.cache_dir) if a.cache_dir else work / "cache"
    shutil.rmtree(cache, ignore_errors=True)

    requests, buckets = [], set()
    for i in range(a.count):
        d = reqs_dir / f"{i:06d}"
        d.mkdir()
        if a.model_kind in ("bert", "roberta"):
            b, s = int(rng.integers(1, a.batch_max + 1)), int(rng.integers(1, a.seq_max + 1))
            feeds = {
                "input_ids": (rng.integers(1, 30000, (b, s)) if a.model_kind == "bert"
                              else rng.integers(3, vocab, (b, s))).astype(np.int64),
                "attention_mask": np.ones((b, s), np.int64),
                "token_type_ids": np.zeros((b, s), np.int64),
            }
            if a.model_kind == "roberta":
                feeds = {k: v for k, v in feeds.items() if k in model_inputs}
            requests.append((b, s))
            buckets.add((pow2_bucket(b, a.batch_max), pow2_bucket(s, a.seq_max)))
        else:
            b = int(rng.integers(1, a.batch_max + 1))
            feeds = {"input": rng.random((b, 3, 224, 224), np.float32)}
            requests.append((b,))
            buckets.add((pow2_bucket(b, a.batch_max),))
        for k, v in feeds.items():
            np.save(d / f"{k}.npy", v)

    model = a.model or ("/tmp/kiln-dyn/bert_base_dyn.onnx" if a.model_kind == "bert" else "/tmp/kiln-dyn/resnet50_dyn.onnx")
    dims = ([] if a.no_flags else
            ["--dim", f"batch=1..{a.batch_max}", "--dim", f"sequence=1..{a.seq_max}"] if a.model_kind == "bert"
            else ["--dim", f"N=1..{a.batch_max}"])
    load_before = os.getloadavg()

    # kiln: one process, one Session, cold cache.
    cmd = [a.stream, model, str(reqs_dir), str(out_dir), *dims, "--cache-dir", str(cache), "--threads", str(a.threads), "--target", a.target]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    kiln_wall = time.perf_counter() - t0
    if p.returncode != 0:
        print(p.stderr, file=sys.stderr)
        return 1
    k = json.loads(p.stdout.strip().splitlines()[-1])

    # ONNX Runtime: one session on the same requests.
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    t0 = time.perf_counter()
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    ort_create = time.perf_counter() - t0
    out_names = [o.name for o in sess.get_outputs()]
    ort_runs, worst, failures = 0.0, 0.0, []
    for i in range(a.count):
        d = reqs_dir / f"{i:06d}"
        feeds = {x.name: np.load(d / f"{x.name}.npy") for x in sess.get_inputs()}
        t0 = time.perf_counter()
        outs = sess.run(None, feeds)
        ort_runs += time.perf_counter() - t0
        for name, o in zip(out_names, outs):
            kv = np.load(out_dir / f"{i:06d}" / f"{name}.npy")
            if kv.shape != o.shape:
                failures.append({"request": i, "shape": list(requests[i]), "output": name,
                                 "why": f"shape {list(kv.shape)} vs ort {list(o.shape)}"})
                continue
            diff = np.abs(kv.astype(np.float64) - o)
            worst = max(worst, float(diff.max()) if diff.size else 0.0)
            if not np.all(diff <= a.atol + a.rtol * np.abs(o)):
                failures.append({"request": i, "shape": list(requests[i]), "output": name,
                                 "max_abs_diff": float(diff.max())})
        shutil.rmtree(out_dir / f"{i:06d}", ignore_errors=True)  # keep the disk use to one request

    compiles = k["compiled_by_run"] + (1 if k["construct_compile_ms"] > 0 else 0)
    # The acceptance compares the cache entry with the model's own bytes
    # (the .onnx and any external data file beside it).
    entry_bytes = sum(f.stat().st_size for f in Path(cache).glob("*.kiln"))
    mp = Path(model)
    model_bytes = mp.stat().st_size + sum(f.stat().st_size for f in mp.parent.glob(mp.stem + "*.data"))
    report = {
        "model": model,
        "params": {"kind": a.model_kind, "target": a.target, "count": a.count, "batch": [1, a.batch_max],
                   "sequence": [1, a.seq_max] if a.model_kind != "resnet" else None, "seed": a.seed,
                   "threads": a.threads, "kiln_dims": dims},
        "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "kiln": {"total_s": round((k["construct_ms"] + k["runs_ms"]) / 1000, 2),
                 "process_wall_s": round(kiln_wall, 2),
                 "session_s": round(k["construct_ms"] / 1000, 2),
                 "runs_s_incl_compiles": round(k["runs_ms"] / 1000, 2),
                 "compile_s": round(k["run_compile_ms"] / 1000, 2),
                 "compiles": compiles, "programs_held": len(k["programs"]),
                 "programs": k["programs"], "split_runs": k.get("split_runs"), "modes": k.get("modes"),
                 "cache_entry_bytes": entry_bytes, "model_bytes": model_bytes,
                 "entry_over_model": round(entry_bytes / model_bytes, 3)},
        "ort": {"version": ort.__version__, "total_s": round(ort_create + ort_runs, 2),
                "session_s": round(ort_create, 2), "runs_s": round(ort_runs, 2), "compiles": 0},
        "kiln_over_ort_total": round((k["construct_ms"] + k["runs_ms"]) / 1000 / max(ort_create + ort_runs, 1e-9), 3),
        "buckets_used": len(buckets),
        "compiles_equal_buckets_used": compiles == len(buckets),
        "outputs_compared": a.count * len(out_names),
        "max_abs_diff": worst,
        "failures": failures[:20],
        "failure_count": len(failures),
    }
    print(json.dumps(report, indent=1))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if not failures and (a.no_flags or compiles == len(buckets)) else 1


if __name__ == "__main__":
    sys.exit(main())
