#!/usr/bin/env bash
# GPU checks for fleet, in one device call. The GPU machine has no Go, so:
#
#   scripts/gpu-check.sh build   here: builds the GPU test binaries and fleet
#                                (CGO_ENABLED=0, linux/amd64) into .gpu/, and
#                                copies the Shakespeare corpus there if found
#   scripts/gpu-check.sh quick [OUT]   there: GPU test suite, fleet doctor,
#                                the attention kernels timed against their
#                                predecessors and PyTorch's SDPA,
#                                the side-by-side benchmark with PyTorch (eager
#                                and torch.compile) and the simulator's
#                                prediction for each fleet row (< 5 min)
#   scripts/gpu-check.sh full [OUT]    there: quick, then nanoGPT's
#                                shakespeare-char run (5000 iterations, cut
#                                at the call's 8-minute budget)
#
# Carry .gpu to the device machine and run quick or full from the repository
# root. Every log and result goes to OUT (default .gpu/results); a short
# table ends the run. Each step has a timeout (STEP_TIMEOUT seconds, default
# 150), so a hang costs one step, not the call.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
G=.gpu
OUT=${2:-$G/results}
STEP_TIMEOUT=${STEP_TIMEOUT:-150}
BUDGET=${BUDGET:-470} # seconds for the whole call, under the device's 8 minutes

build() {
  set -e
  mkdir -p "$G"
  export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
  for pkg in backend/gpu backend/gpu/cuda/driver backend/gpu/cuda/nvrtc backend/gpu/cuda/cublas monitor/nvml monitor/sysstat; do
    go test -c -o "$G/$(echo "$pkg" | tr / _).test" "./$pkg"
  done
  go build -o "$G/fleet" ./cmd/fleet
  if [ -f ../shared/data/tinyshakespeare.txt ]; then
    mkdir -p "$G/data" && cp ../shared/data/tinyshakespeare.txt "$G/data/"
  fi
  ls -l "$G"
}

# run NAME CMD...: runs a step under the step timeout (or the time left of
# the call's budget, if less), logs it to OUT, and records its status for
# the table: ok, FAIL, TIMEOUT, or skip (every test skipped: no GPU).
declare -a rows
run() {
  local name=$1; shift
  local t0=$SECONDS
  local limit=$STEP_TIMEOUT left=$((BUDGET - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -le 5 ]; then
    rows+=("$(printf '%-34s %-7s %4ds' "$name" "no-time" 0)")
    return 1
  fi
  # Through bash, so that a step may be one of the functions below.
  timeout --kill-after=5 "$limit" bash -c '"$@"' bash "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  case $rc in
    0) st=ok ;;
    124|137) st=TIMEOUT ;;
    *) st=FAIL ;;
  esac
  if [ $st = ok ] && grep -q -- '--- SKIP' "$OUT/$name.log" && ! grep -q -- '--- PASS' "$OUT/$name.log"; then
    st=skip
  fi
  rows+=("$(printf '%-34s %-7s %4ds' "$name" "$st" $((SECONDS - t0)))")
  tail -n 3 "$OUT/$name.log" | sed "s/^/  [$name] /"
  return $rc
}

# testbin PKGDIR BIN ARGS...: a test binary, run from its package folder.
testbin() { local dir=$1 bin=$2; shift 2; (cd "$dir" && "$OLDPWD/$G/$bin" "$@"); }

# fleetbench CONFIG FLAGS...: one fleet bench row, with the simulated
# H200's prediction for the same step beside the measurement.
fleetbench() {
  local name=$1; shift
  "$G/fleet" bench --device sim:h200 --precision bf16 --steps 3 --warmup 2 --matmuls=false --json "$OUT/sim-$name.json" "$@" \
    >"$OUT/sim-$name.log" 2>&1
  "$G/fleet" bench --device cuda --precision bf16 --steps 30 --warmup 10 --matmuls=false --json "$OUT/fleet-$name.json" "$@" \
    >"$OUT/fleet-$name.log" 2>&1
  local rc=$?
  local row
  row=$(python3 - "$OUT/fleet-$name.json" "$OUT/sim-$name.json" <<'PY'
import json, sys
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return {}
m, s = load(sys.argv[1]), load(sys.argv[2])
print("%s ms/step measured | %s predicted (sim:h200) | %s tokens/s | MFU %s" % (
    "%.2f" % m["ms_per_step"] if "ms_per_step" in m else "n/a",
    "%.2f" % s["predicted_ms_per_step"] if "predicted_ms_per_step" in s else "n/a",
    "%.0f" % m["tokens_per_sec"] if "tokens_per_sec" in m else "n/a",
    "%.1f%%" % (100 * m["mfu"]) if m.get("mfu") else "n/a"))
PY
)
  printf '%-8s %-36s %s\n' "$name" "fleet bf16" "$row" >>"$OUT/bench.txt"
  return $rc
}

# torchbench NAME FLAGS...: one PyTorch row (add --compile for
# torch.compile); where PyTorch fails, the row says why.
torchbench() {
  local name=$1; shift
  local out
  out=$(python3 scripts/torch_gpu_bench.py "$@" 2>"$OUT/torch-$name.err") || {
    printf '%-8s pytorch %s failed: %s\n' "$name" "$*" "$(tail -1 "$OUT/torch-$name.err")" >>"$OUT/bench.txt"; return 1; }
  echo "$out" >"$OUT/torch-$name.json"
  printf '%-8s %s\n' "$name" "$out" >>"$OUT/bench.txt"
}

quick() {
  mkdir -p "$OUT"
  : >"$OUT/bench.txt"
  nvidia-smi -L 2>/dev/null || true
  run doctor "$G/fleet" doctor
  run gpu-suite testbin backend/gpu backend_gpu.test -test.run 'GPU' -test.v
  run driver-gpu testbin backend/gpu/cuda/driver backend_gpu_cuda_driver.test -test.run 'TestGPU' -test.v
  run nvrtc testbin backend/gpu/cuda/nvrtc backend_gpu_cuda_nvrtc.test -test.v
  run nvml testbin monitor/nvml monitor_nvml.test -test.run 'DriverAndDevices' -test.v
  run gpu-sampler testbin monitor/sysstat monitor_sysstat.test -test.run 'GPUSampler' -test.v
  run smi "$G/fleet" smi
  # The tensor-core attention kernels against the CUDA-core ones they
  # replace, and PyTorch's SDPA on the same shapes.
  run attn-bench testbin backend/gpu backend_gpu.test -test.run '^$' -test.bench 'GPUAttention' -test.benchtime 20x
  run torch-sdpa python3 scripts/torch_sdpa_bench.py
  # A short run with every monitor on: --batch-size auto probes, telemetry
  # (device events), TensorBoard files read back by TensorBoard itself.
  rm -rf "$G/monitor-run" "$G/tb" # fleet train refuses a folder that holds a run: a rerun starts afresh
  run train-monitor "$G/fleet" train --device cuda --precision bf16 --batch-size auto --tokens-per-step 65536 \
    --max-iters 40 --eval-interval 20 --eval-iters 5 --log-interval 5 --out "$G/monitor-run" --tensorboard "$G/tb"
  run tb-check python3 scripts/tb_check.py "$G/tb"
  run recompute "$G/fleet" bench --device cuda --precision bf16 --steps 10 --warmup 3 --matmuls=false --recompute \
    --n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --batch-size 16 --vocab-size 50304
  A=(--n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 --vocab-size 65)
  B=(--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --batch-size 16 --vocab-size 50304)
  run fleet-bench-a fleetbench char "${A[@]}"
  run torch-bench-a torchbench char "${A[@]}"
  run torch-compile-a torchbench char-compile "${A[@]}" --compile
  run fleet-bench-b fleetbench gpt2 "${B[@]}"
  run fleet-bench-b-graphs fleetbench gpt2-graphs "${B[@]}" --cuda-graphs
  run torch-bench-b torchbench gpt2 "${B[@]}"
  run torch-compile-b torchbench gpt2-compile "${B[@]}" --compile
}

report() {
  echo; echo "== steps"; printf '%s\n' "${rows[@]}"
  echo; echo "== benchmark (medians of 30 steps after 10; MFU against the data sheet's dense bf16 peak)"
  cat "$OUT/bench.txt"
  { printf '%s\n' "${rows[@]}"; echo; cat "$OUT/bench.txt"; } >"$OUT/summary.txt"
}

# shakespeare runs nanoGPT's config/train_shakespeare_char.py (it reports
# val loss 1.4697 after 5000 iterations), for what is left of the budget:
# cut short, its last evaluation stands in the log.
shakespeare() {
  local data=$G/data/tinyshakespeare.txt
  [ -f "$data" ] || { echo "no $data: run build where ../shared/data has it"; return 1; }
  rm -rf "$OUT/shakespeare-char" # a rerun starts afresh (fleet train refuses a folder that holds a run)
  "$G/fleet" train --device cuda --precision bf16 --data "$data" --out "$OUT/shakespeare-char" \
    --n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 --dropout 0.2 \
    --lr 1e-3 --min-lr 1e-4 --beta2 0.99 --warmup-iters 100 --max-iters 5000 --lr-decay-iters 5000 \
    --eval-interval 250 --eval-iters 200 --log-interval 50
}

full() {
  quick
  STEP_TIMEOUT=$BUDGET run shakespeare shakespeare
  grep -E '^eval|^done' "$OUT/shakespeare.log" | tail -n 3
}

export G OUT
export -f testbin fleetbench torchbench shakespeare

case "$mode" in
  build) build ;;
  quick) quick; report ;;
  full) full; report ;;
  *) sed -n '2,20p' "$0"; exit 2 ;;
esac
