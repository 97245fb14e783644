#!/bin/bash
# Device script (issue 17, the fp16 precision check), run after remote.sh with
# .gpu carried (KILN_SKIP_CODEGEN=1 saves remote.sh's CPU-only tests):
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh scripts/device/precision_check.sh
# PCHECK_KILN / PCHECK_GTEST / PCHECK_DIR: the kiln binary, the GPU test
# binary and the input folder (defaults: build-cuda/..., .gpu/pcheck);
# PCHECK_BUDGET_S (default 225) stops it in time; PCHECK_TUNING (heuristic).
# .gpu/pcheck/ holds the small inputs made here: sig.onnx + x.npy (the k = 50
# sigmoid head of tests/cli/conftest.py), mnv3s_uncal.onnx + mn_x.npy
# (torchvision mobilenet_v3_small, weights=None, seed 0, BatchNorm left
# uncalibrated, TorchScript export at opset 17, batch dynamic).
# Steps, each with its own timeout, results under $OUT:
#   1. the GPU test CudaPrecisionCheck.* (k = 50 head within 1e-2 with the check, far off without)
#   2. kiln verify of the head, fp16, check on and off (--json)
#   3. kiln verify of the uncalibrated mobilenet_v3_small, fp16 check on / off, bf16
#   4. ResNet-50 and BERT-base (bench/make_gpu_models.py, random weights, batch 1):
#      kiln perf fp16 with the check on and off (same tuning): latency, and the
#      kept nodes from `kiln inspect` of the kept artifacts
set -u
K=${PCHECK_KILN:-build-cuda/tools/kiln/kiln}
GT=${PCHECK_GTEST:-build-cuda/tests/cuda/kiln_cuda_gpu_tests}
P=${PCHECK_DIR:-.gpu/pcheck}
T0=$(date +%s)
BUDGET=${PCHECK_BUDGET_S:-225}
TUNING=${PCHECK_TUNING:-heuristic}
left() { echo $((BUDGET - ($(date +%s) - T0))); }
step() {  # step NAME TIMEOUT CMD...: runs CMD with stdout to $OUT/NAME.out unless the budget is spent
  local name=$1 t=$2; shift 2
  local l; l=$(left)
  if [ "$l" -lt 5 ]; then echo "[$name] skipped: budget spent"; return; fi
  [ "$t" -gt "$l" ] && t=$l
  local s; s=$(date +%s)
  timeout "$t" "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
  echo "[$name] rc $? in $(( $(date +%s) - s )) s"
}
export OMP_WAIT_POLICY=PASSIVE
step gtest 60 $GT --gtest_filter='CudaPrecisionCheck.*'
grep -E "sigmoid head|OK|FAILED" "$OUT/gtest.out"
step sig_on 30 $K verify $P/sig.onnx --target cuda --precision fp16 --input x=$P/x.npy --json
step sig_off 30 $K verify $P/sig.onnx --target cuda --precision fp16 --precision-check off --input x=$P/x.npy --json
step mn_on 40 $K verify $P/mnv3s_uncal.onnx --target cuda --precision fp16 --input input=$P/mn_x.npy --json
step mn_off 40 $K verify $P/mnv3s_uncal.onnx --target cuda --precision fp16 --precision-check off --input input=$P/mn_x.npy --json
step mn_bf16 40 $K verify $P/mnv3s_uncal.onnx --target cuda --precision bf16 --precision-check off --input input=$P/mn_x.npy --json
python3 - "$OUT" <<'EOF'
import json, sys, os
out = sys.argv[1]
for n in ("sig_on", "sig_off", "mn_on", "mn_off", "mn_bf16"):
    try:
        j = json.load(open(os.path.join(out, n + ".out")))
        o = j["outputs"][0]
    except Exception as e:
        print(n, "no result:", repr(e), open(os.path.join(out, n + ".err")).read()[-300:]); continue
    f = j["first_failure"]
    notes = [x[:160] for x in j["notes"] if "precision check" in x]
    print(n, "ok" if j["ok"] else "FAIL", "output max_rel %.3e max_abs %.3e ref_max %.3e" % (o["max_rel"] or -1, o["max_abs"] or -1, o["ref_max_abs"] or -1),
          "first failure:", (f["node"], f["op"], f["ref_value"], f["max_rel"]) if f else None, notes)
EOF
mkdir -p /tmp/pm
step export 120 python3 bench/make_gpu_models.py /tmp/pm resnet50 bert_base
ls -la /tmp/pm
for m in resnet50 bert_base; do
  for c in on off; do
    step perf_${m}_$c 60 $K perf /tmp/pm/$m.onnx --target cuda --precision fp16 --tuning $TUNING --precision-check $c \
      --runs 200 --warmup 20 --keep /tmp/pm/${m}_$c.kiln --json
    [ -f /tmp/pm/${m}_$c.kiln ] && $K inspect /tmp/pm/${m}_$c.kiln --json > "$OUT/inspect_${m}_$c.json" 2>/dev/null
  done
done
python3 - "$OUT" <<'EOF'
import json, sys, os
out = sys.argv[1]
for m in ("resnet50", "bert_base"):
    for c in ("on", "off"):
        try:
            p = json.load(open(os.path.join(out, f"perf_{m}_{c}.out")))
            i = json.load(open(os.path.join(out, f"inspect_{m}_{c}.json")))
        except Exception as e:
            print(m, c, "no result:", e); continue
        pc = i.get("precision_check") or {}
        keys = {k: p[k] for k in p if any(s in k for s in ("latency", "ms", "p50", "mean"))}
        print(m, c, "check:", pc.get("state"), "kept", len(pc.get("kept", [])), "of", pc.get("nodes"),
              "check ms %.0f" % pc.get("ms", 0), "output error", pc.get("output_error_after"), json.dumps(keys))
EOF
echo "total $(( $(date +%s) - T0 )) s"
