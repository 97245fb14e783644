#!/bin/bash
# Device script (issue 17, "ResNet-50 and BERT-base keep >= 95% of their nodes
# in 16-bit and lose <= 3% latency"), run after remote.sh with .gpu carried
# (a build-cuda of a kiln with the 16-bit share: integer Casts to 16 bits,
# clamped constants; KILN_SKIP_CODEGEN=1 saves remote.sh's CPU-only tests):
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh scripts/device/precision_share.sh
# PSHARE_KILN: the kiln binary (default build-cuda/tools/kiln/kiln);
# PSHARE_BUDGET_S (default 420) stops it in time; PSHARE_TUNING (heuristic).
# Steps, each with its own timeout, results under $OUT:
#   1. ResNet-50 and BERT-base exported by bench/make_gpu_models.py (random
#      weights, batch 1, BERT sequence 128) into /tmp/ps, and BERT's seeded
#      inputs (make_inputs: ids, a mask whose last 10 positions are 0, token
#      types) as .npy
#   2. kiln perf fp16 of each, precision check off / on / off / on (the same
#      tuning; a fresh process each), 200 runs after 20 warm-up: latency
#      median (host I/O) and device-I/O median; kiln inspect of each artifact
#      for the check's kept nodes and the 16-bit share
#   3. kiln verify of BERT-base fp16 (check on) on the padded inputs: every
#      value against the ref target, the outputs' max_rel and the first failure
#   4. a summary: share, kept nodes, latency on vs off (median of the two runs
#      each), verify's result
set -u
K=${PSHARE_KILN:-build-cuda/tools/kiln/kiln}
T0=$(date +%s)
BUDGET=${PSHARE_BUDGET_S:-420}
TUNING=${PSHARE_TUNING:-heuristic}
P=/tmp/ps
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
mkdir -p $P
step export 150 python3 bench/make_gpu_models.py $P resnet50 bert_base
python3 - $P <<'EOF'
import sys
sys.path.insert(0, "bench")
import numpy as np
from make_gpu_models import make_inputs
for k, v in make_inputs("bert_base", 1).items():
    np.save(f"{sys.argv[1]}/{k}.npy", v)
EOF
ls -la $P
n=0
for m in resnet50 bert_base; do
  for c in off on off on; do
    n=$((n + 1))
    step perf_${m}_${c}_$n 90 $K perf $P/$m.onnx --target cuda --precision fp16 --tuning $TUNING --precision-check $c \
      --runs 200 --warmup 20 --keep $P/${m}_$c.kiln --json
    [ -f $P/${m}_$c.kiln ] && $K inspect $P/${m}_$c.kiln --json > "$OUT/inspect_${m}_$c.json" 2>/dev/null
  done
done
step verify_bert 150 $K verify $P/bert_base.onnx --target cuda --precision fp16 --tuning $TUNING \
  --input input_ids=$P/input_ids.npy --input attention_mask=$P/attention_mask.npy \
  --input token_type_ids=$P/token_type_ids.npy --json
python3 - "$OUT" <<'EOF'
import glob, json, os, statistics, sys
out = sys.argv[1]
def load(path):
    try:
        return json.load(open(path))
    except Exception as e:
        return {"error": repr(e)}
for m in ("resnet50", "bert_base"):
    lat = {"on": [], "off": []}
    dev = {"on": [], "off": []}
    for f in sorted(glob.glob(os.path.join(out, f"perf_{m}_*.out"))):
        c = os.path.basename(f).split("_")[-2]
        p = load(f)
        if "latency_ms_median" in p:
            lat[c].append(p["latency_ms_median"])
            if "latency_device_io_ms_median" in p:
                dev[c].append(p["latency_device_io_ms_median"])
        print(m, c, os.path.basename(f), {k: p.get(k) for k in ("compile_ms", "latency_ms_median",
                                                                "latency_device_io_ms_median", "error")})
    for c in ("on", "off"):
        i = load(os.path.join(out, f"inspect_{m}_{c}.json"))
        pc, ps = i.get("precision_check") or {}, i.get("precision_share") or {}
        print(m, c, "check:", pc.get("state"), "kept", len(pc.get("kept", [])), "of", pc.get("nodes"),
              "| share:", ps.get("nodes_16bit"), "of", ps.get("float_nodes"), "float32:",
              [(f["node"], f["why"]) for f in ps.get("fp32", [])][:5], "clamped", ps.get("clamped_constants"))
    if lat["on"] and lat["off"]:
        on, off = statistics.median(lat["on"]), statistics.median(lat["off"])
        line = f"{m}: latency median on {on:.4f} ms vs off {off:.4f} ms: {100 * (on / off - 1):+.1f} %"
        if dev["on"] and dev["off"]:
            d_on, d_off = statistics.median(dev["on"]), statistics.median(dev["off"])
            line += f"; device I/O {d_on:.4f} vs {d_off:.4f} ms: {100 * (d_on / d_off - 1):+.1f} %"
        print(line, "(runs:", lat, ")")
v = load(os.path.join(out, "verify_bert.out"))
if "outputs" in v:
    f = v.get("first_failure")
    sat = sum(x.get("saturated_elements", 0) for x in v.get("values", []))
    print("verify bert_base fp16:", "ok" if v["ok"] else "FAIL", "compared", v.get("compared"),
          "saturated elements", sat,
          [(o["value"], o["max_abs"], o["max_rel"], o["pass"]) for o in v["outputs"]],
          "first failure:", (f["node"], f["op"], f["value"], f["max_rel"]) if f else None)
else:
    print("verify bert_base: no result", v, open(os.path.join(out, "verify_bert.err")).read()[-400:])
EOF
echo "total $(( $(date +%s) - T0 )) s"
