#!/bin/bash
# The cuda LSTM kernels (issue 17, build item 3; gen_recurrent.cpp) on the GPU
# machine, after remote.sh (scripts/device/README.md, "Native LSTM"):
#   scripts/device/remote.sh scripts/device/lstm_session.sh
# Needs, beside the packed build: .gpu/models/*.onnx (Silero VAD models) and
# .gpu/inputs/<model>/<input>.npy (their inputs, tools/models/zoo_models.py's
# silero_inputs). Steps:
#   1. kiln_cuda_recurrent_gpu_tests, with KILN_SILERO_MODELS = every model there;
#   2. `kiln perf --profile --json` of each model in KILN_LSTM_PERF_MODELS
#      (default silero_vad_default faster_whisper_silero_vad_v6), fp32 and
#      fp16, with the LSTM on the host (KILN_CUDA_LSTM=0, as before the kernel)
#      and native, interleaved; a summary line each: median latency (host I/O),
#      device-I/O latency, the host segments' ms and share, the LSTM kernels' ms.
# Results: $OUT/lstm_session.tgz (logs/, perf JSON, summary.txt).
set -u
T0=$(date +%s)
mkdir -p "$OUT/logs"
K=build-cuda/tools/kiln/kiln
models=$(ls .gpu/models/*.onnx 2>/dev/null | tr '\n' ':')
echo "== recurrent GPU tests (KILN_SILERO_MODELS=$models)"
KILN_SILERO_MODELS=$models timeout "${KILN_LSTM_TEST_S:-200}" build-cuda/tests/cuda/kiln_cuda_recurrent_gpu_tests \
  > "$OUT/logs/recurrent_gpu.log" 2>&1
echo "recurrent GPU tests: rc=$? ($(( $(date +%s) - T0 )) s)" | tee "$OUT/logs/summary.txt"
grep -E "^\[  (PASSED|FAILED) |^\[       OK|^\[  FAILED|Failure|worst/tol|max\|diff\|" "$OUT/logs/recurrent_gpu.log" | head -120
for m in ${KILN_LSTM_PERF_MODELS:-silero_vad_default faster_whisper_silero_vad_v6}; do
  ins=()
  for f in .gpu/inputs/"$m"/*.npy; do ins+=(--input "$(basename "$f" .npy)=$f"); done
  for p in fp32 fp16; do
    for lstm in 0 1; do
      tag=${m}_${p}_lstm${lstm}
      KILN_CUDA_LSTM=$lstm timeout 120 "$K" perf ".gpu/models/$m.onnx" --target cuda --precision "$p" --runs 200 \
        --warmup 20 --profile --json "${ins[@]}" > "$OUT/logs/perf_$tag.json" 2> "$OUT/logs/perf_$tag.err"
      echo "perf $tag: rc=$?" >> "$OUT/logs/summary.txt"
      python3 - "$OUT/logs/perf_$tag.json" "$tag" >> "$OUT/logs/summary.txt" <<'EOF'
import json, sys
try:
    o = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"{sys.argv[2]}: no JSON ({e})"); sys.exit(0)
lat = o.get("latency_ms_median"); dev = o.get("latency_device_io_ms_median")
if lat is None:
    print(f"{sys.argv[2]}: no latency in the JSON"); sys.exit(0)
prof = o.get("profile") or {}
host = sum(x.get("ms", 0) for x in prof.get("by_op") or [] if x.get("op") == "host")
lstm = sum(x.get("ms", 0) for x in prof.get("by_op") or [] if "lstm" in x.get("op", ""))
print(f"{sys.argv[2]}: latency median {lat:.4f} ms (device I/O {dev if dev is None else round(dev, 4)} ms), "
      f"profiled total {prof.get('total_ms', 0):.4f} ms, host segments {host:.4f} ms = "
      f"{100 * host / lat if lat else 0:.1f}% of the median, LSTM kernels {lstm:.4f} ms")
EOF
    done
  done
done
cat "$OUT/logs/summary.txt"
echo "total $(( $(date +%s) - T0 )) s"
cd "$OUT" && tar czf lstm_session.tgz logs && rm -rf logs
