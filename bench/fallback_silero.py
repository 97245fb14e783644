#!/usr/bin/env python3
"""Silero VAD (op18, the dev set's) on cuda against ONNX Runtime (issue 17).

Three kiln configurations on the same seeded inputs (tools/models/inputs.py):
  cuda                         value specialization on (the If on the sample
                               rate folds to its branch): a device program
  cuda --no-value-specialization  the If stays and runs in a host segment
  cpu                          the cpu target, for its latency beside cuda's
Each: `kiln run` outputs against ORT (max|diff| <= 1e-3 x max|ref| per
output), `kiln perf` median latency, and the segments from `kiln inspect`.

Usage: fallback_silero.py --kiln PATH --model silero_vad.onnx
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools" / "models"))
from inputs import make_inputs  # noqa: E402

CONFIGS = [("cuda", ["--target", "cuda"]),
           ("cuda, value specialization off", ["--target", "cuda", "--no-value-specialization"]),
           ("cpu", ["--target", "cpu"])]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    sess = ort.InferenceSession(a.model, providers=["CPUExecutionProvider"])
    feeds = make_inputs("silero_vad", [(i.name, i.type, i.shape) for i in sess.get_inputs()])
    names = [o.name for o in sess.get_outputs()]
    ref = dict(zip(names, sess.run(None, feeds)))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        args = []
        for i, (n, v) in enumerate(feeds.items()):
            np.save(t / f"in{i}.npy", v)
            args += ["--input", f"{n}={t / f'in{i}.npy'}"]
        for label, extra in CONFIGS:
            out = t / label.replace(" ", "_").replace(",", "")
            r = subprocess.run([a.kiln, "run", a.model, *args, "--output-dir", str(out), "--no-cache", "--json", *extra],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                print(f"{label}: kiln run exit {r.returncode}: {r.stderr.strip()[-400:]}")
                ok = False
                continue
            obj = json.loads(r.stdout)
            files = {o["name"]: o["file"] for o in obj["outputs"]}
            worst = 0.0
            for n in names:
                got = np.load(files[n])
                scale = float(np.max(np.abs(ref[n]))) or 1.0
                worst = max(worst, float(np.max(np.abs(got.astype(np.float64) - ref[n]))) / scale)
            host = [x for x in obj.get("reference_nodes") or [] if "host segment" in str(x.get("reason", ""))]
            p = subprocess.run([a.kiln, "perf", a.model, *args, "--runs", "200", "--json", *extra],
                               capture_output=True, text=True, timeout=120)
            lat = json.loads(p.stdout)["latency_ms_median"] if p.returncode == 0 else None
            passed = worst <= 1e-3
            ok &= passed
            print(f"{label}: max|diff|/max|ref| {worst:.2e} ({'PASS' if passed else 'FAIL'}), latency median "
                  f"{lat if lat is None else f'{lat:.3f} ms'}, host nodes: "
                  f"{', '.join(x['op'] + ' ' + repr(x['node']) for x in host) or 'none'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
