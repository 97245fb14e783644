#!/usr/bin/env python3
"""Device script (scripts/device/spec_session.sh): models exported the way
their owners export them, run by kiln on cuda with no shape flags.

  spec_models.py DIR                      export into DIR (torch's default exporter, dynamic axes on)
  spec_models.py DIR --check KILN --cache C   run each on cuda fp32 and fp16 through cache C:
      batch 2 (compiles), batch 3 (adds a program), batch 2 again in a new
      process (must be a cache hit that compiles nothing); every output
      against ONNX Runtime (CPU) on the same inputs: max|kiln - ort| <=
      1e-3 * max|ort| in fp32, 1e-2 * max|ort| in fp16 (issue 17's bounds).
      Then the If-on-a-runtime-scalar model (tools/models/small_models.py)
      for sr = 16000 (512 samples) and 8000 (256 samples).
Prints one line per run and a summary; exits 1 when any run fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "models"))


def export(out: Path) -> None:
    import torch
    import torchvision

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    vision = {"resnet18": torchvision.models.resnet18, "mobilenet_v3_small": torchvision.models.mobilenet_v3_small,
              "convnext_tiny": torchvision.models.convnext_tiny}
    manifest = {}
    for name, ctor in vision.items():
        m = ctor(weights=None).eval()
        x = torch.rand(2, 3, 224, 224)
        path = out / f"{name}.onnx"
        t0 = time.time()
        how = "dynamo"
        try:
            batch = torch.export.Dim("batch", min=1, max=1024)
            torch.onnx.export(m, (x,), str(path), input_names=["input"], output_names=["output"],
                              dynamic_shapes={"x": {0: batch}}, dynamo=True)
        except Exception as e:  # noqa: BLE001 - record and fall back to the TorchScript exporter
            print(f"{name}: dynamo export failed ({type(e).__name__}: {str(e)[:200]}); TorchScript exporter")
            how = "torchscript"
            torch.onnx.export(m, (x,), str(path), input_names=["input"], output_names=["output"],
                              dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=17,
                              dynamo=False)
        import onnx

        model = onnx.load(str(path), load_external_data=False)
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        manifest[name] = {"exporter": how, "opset": opset, "torch": torch.__version__,
                          "inputs": [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
                                     for i in model.graph.input]}
        print(f"{name}: exported in {time.time() - t0:.1f} s ({how}, opset {opset}) {manifest[name]['inputs']}")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


def run_kiln(kiln: str, model: Path, feeds: dict, work: Path, extra: list[str]) -> tuple[dict, dict]:
    work.mkdir(parents=True, exist_ok=True)
    args = [kiln, "run", str(model), "--json", "--output-dir", str(work / "out"), *extra]
    for k, v in feeds.items():
        np.save(work / f"{k}.npy", v)
        args += ["--input", f"{k}={work / f'{k}.npy'}"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=240)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-600:]}")
    j = json.loads(p.stdout)
    outs = {o["name"]: np.load(o["file"]) for o in j["outputs"]}
    return j, outs


def check(out: Path, kiln: str, cache: Path) -> int:
    import onnxruntime as ort

    failures = 0
    rows = []
    models = sorted(out.glob("*.onnx"))
    for model in models:
        sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        for precision, bound in (("fp32", 1e-3), ("fp16", 1e-2)):
            for step, batch in enumerate((2, 3, 2)):
                x = np.random.RandomState(batch).rand(batch, 3, 224, 224).astype(np.float32)
                feeds = {sess.get_inputs()[0].name: x}
                ref = sess.run(None, feeds)
                try:
                    j, got = run_kiln(kiln, model, feeds, out / "work" / f"{model.stem}_{precision}_{step}",
                                      ["--target", "cuda", "--precision", precision, "--cache-dir", str(cache)])
                except Exception as e:  # noqa: BLE001
                    failures += 1
                    rows.append(f"{model.stem} {precision} b{batch}: FAIL {e}")
                    continue
                worst = 0.0
                for o, r in zip(sess.get_outputs(), ref):
                    k = got[o.name]
                    scale = float(np.abs(r).max()) or 1.0
                    worst = max(worst, float(np.abs(k.astype(np.float64) - r).max()) / scale if k.shape == r.shape
                                else float("inf"))
                ok = worst <= bound
                if step == 2 and (j["cache"] != "hit" or j["compiled_by_run"] != 0):
                    ok = False
                failures += not ok
                rows.append(f"{model.stem} {precision} b{batch}: {'ok' if ok else 'FAIL'} rel_err {worst:.2e} "
                            f"cache {j['cache']} compiled_by_run {j['compiled_by_run']} "
                            f"compile {j['run_compile_ms']:.0f} ms run {j['run_ms']:.2f} ms "
                            f"reference_nodes {len(j['reference_nodes'])}")
                print(rows[-1], flush=True)
    from small_models import branch_model

    vad = branch_model(out / "vad_like.onnx")
    sess = ort.InferenceSession(str(vad), providers=["CPUExecutionProvider"])
    for sr, n in ((16000, 512), (8000, 256)):
        feeds = {"x": np.random.RandomState(n).rand(1, n).astype(np.float32), "sr": np.array(sr, np.int64)}
        ref = sess.run(None, feeds)[0]
        try:
            j, got = run_kiln(kiln, vad, feeds, out / "work" / f"vad_{sr}",
                              ["--target", "cuda", "--cache-dir", str(cache)])
            err = float(np.abs(got["y"] - ref).max())
            ok = err <= 1e-5
            rows.append(f"vad_like sr={sr} n={n}: {'ok' if ok else 'FAIL'} max_abs_err {err:.2e} "
                        f"compiled_by_run {j['compiled_by_run']}")
        except Exception as e:  # noqa: BLE001
            ok = False
            rows.append(f"vad_like sr={sr}: FAIL {e}")
        failures += not ok
        print(rows[-1], flush=True)
    print(f"summary: {len(rows) - failures} ok, {failures} failed")
    return 1 if failures else 0


def main() -> int:
    out = Path(sys.argv[1])
    if "--check" in sys.argv:
        kiln = sys.argv[sys.argv.index("--check") + 1]
        cache = Path(sys.argv[sys.argv.index("--cache") + 1])
        return check(out, kiln, cache)
    export(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
