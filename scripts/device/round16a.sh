#!/bin/bash
# Session 16's first device call, after remote.sh (build-cuda unpacked from .gpu/build.tar.xz) with .gpu
# carried (build.tar.xz, debs, gpuzoo: the cp312 wheel of the same commit + debs, node.tar.xz: the ONNX
# node test data, zoo_wheel/rapidocr_rec_v4.onnx); timeout_s 600:
#   KILN_SKIP_CODEGEN=1 scripts/device/remote.sh bash scripts/device/round16a.sh
# 1. Issue #17's two GPU runs left from session 15, before anything is timed:
#    - the ONNX node tests on cuda with --fallback error (zoo_cuda_parallel.sh's conformance steps);
#    - rapidocr_rec_v4 in fp16 with its page as the precision check's input (the zoo's check).
# 2. The GPU test programs (kiln_cuda_gpu_tests: the attention cases with packed / merged Q, K, V).
# 3. Issue #20's dev set, BERT-base fp16 batch 1 and 32 with device I/O and --profile, with the merged
#    Q/K/V projections and without (KILN_CUDA_MERGE_QKV=0), interleaved.
# 4. The GPU zoo rows the attention change touches (reduce-overhead, kiln and torch in this call;
#    R16A_ZOO overrides): ViT-B/16, RoBERTa, DistilBERT, GPT-2.
# Output: $OUT/round16a_logs.tar.gz, $OUT/gpu_zoo.{md,jsonl}, $OUT/zoo_cuda_report.md.
set -u
T0=$(date +%s)
L=$OUT/round16a_logs; mkdir -p "$L"
( uname -r; nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm --format=csv,noheader ) > "$L/machine.txt"
cat "$L/machine.txt"

# 1. Conformance (--fallback error) and rapidocr_rec_v4 fp16, one zoo_cuda_parallel.sh call.
OUT=$L/zoo KILN_ZOO_CONFORMANCE=1 KILN_ZOO_CONF_STEPS="c00:error c01:error c02:error c03:error" \
  KILN_ZOO_CONF_JOBS=8 KILN_ZOO_WORKERS=1 KILN_ZOO_PRECISIONS=fp16 KILN_ZOO_BUDGET_S=${R16A_ZOO_S:-200} \
  bash scripts/device/zoo_cuda_parallel.sh rapidocr_rec_v4 > "$L/zoo_cuda_call.log" 2>&1
echo "zoo + conformance done at $(( $(date +%s) - T0 )) s"
tail -30 "$L/zoo_cuda_call.log"
cp "$L/zoo/zoo_cuda_report.md" "$OUT/" 2>/dev/null

# 2. GPU tests.
left=$(( 330 - ($(date +%s) - T0) ))
timeout "$left" build-cuda/tests/cuda/kiln_cuda_gpu_tests > "$L/kiln_cuda_gpu_tests.log" 2>&1
echo "kiln_cuda_gpu_tests rc $?: $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/kiln_cuda_gpu_tests.log" | tr '\n' ' ') at $(( $(date +%s) - T0 )) s"
grep -E "^\[  FAILED|attention" "$L/kiln_cuda_gpu_tests.log" | head -30

# 3. BERT-base dev set, merged vs not.
P=/tmp/r16models; mkdir -p $P
python3 bench/make_gpu_models.py $P bert_base > "$L/export_b1.log" 2>&1
python3 bench/make_gpu_models.py $P --batch 32 bert_base > "$L/export_b32.log" 2>&1
for f in bert_base bert_base_b32; do
  for v in 1 0; do
    left=$(( 450 - ($(date +%s) - T0) )); [ "$left" -gt 30 ] || { echo "$f merge=$v: not run (time)"; continue; }
    KILN_CUDA_MERGE_QKV=$v timeout "$left" build-cuda/tools/kiln/kiln perf "$P/$f.onnx" --target cuda --precision fp16 \
      --runs 300 --profile > "$L/devset_${f}_merge$v.txt" 2>&1
    echo "$f merge=$v rc $? at $(( $(date +%s) - T0 )) s: $(grep -E 'device I/O|latency' "$L/devset_${f}_merge$v.txt" | tr -s ' ' | tr '\n' ';')"
  done
done

# 4. GPU zoo rows.
left=$(( ${R16A_END_S:-575} - ($(date +%s) - T0) ))
if [ "$left" -gt 60 ]; then
  GPU_ZOO_BUDGET_S=$left KILN_PY_GPU_DIR=.gpu/gpuzoo bash scripts/device/gpu_zoo.sh \
    --models ${R16A_ZOO:-vit_b_16 roberta distilbert gpt2_prefill} > "$L/gpu_zoo_call.log" 2>&1
  echo "gpu zoo done at $(( $(date +%s) - T0 )) s"; grep -E "^\| |geometric" "$OUT/gpu_zoo.md" 2>/dev/null | head -20
fi
tar -czf "$OUT/round16a_logs.tar.gz" -C "$L" .
echo "round16a done at $(( $(date +%s) - T0 )) s"
