#!/usr/bin/env bash
# GPU checks for fleet, sized to one device call of 8 minutes. The GPU
# machine has no Go, so:
#
#   scripts/gpu-check.sh build          here: builds fleet and the GPU test
#                                       binaries (CGO_ENABLED=0, linux/amd64)
#                                       into .gpu/, and compiles every kernel
#                                       for sm_80 and sm_90 into .gpu/kernels
#                                       (where NVRTC is installed), which the
#                                       GPU machine loads where its driver
#                                       takes them instead of compiling
#   scripts/gpu-check.sh run [OUT]      there: the stages below, most valuable
#                                       first, each under its own budget and
#                                       all within BUDGET seconds (450)
#   scripts/gpu-check.sh dry-run [OUT]  here, without a GPU: the same stages
#                                       against the simulated GPU (sim:h100),
#                                       PyTorch's skipped; prints the summary
#
# The stages, in value order (budget in seconds):
#   doctor           fleet doctor: driver, libraries, devices                 20
#   gpt2-fleet       GPT-2 124M (bf16, B 16, T 1024) on fleet, and the
#                    simulated model of the GPU found (sim:h100 on an H100)   75
#   gpt2-torch       the same step in PyTorch, eager                          60
#   gpt2-compile     ... and torch.compile                                    150
#   gpu-tests        the kernels and the GPT held to the CPU on the GPU,
#                    compiling only the kernels they run (prebuilt first)     90
#   driver-tests     the driver binding's own GPU tests                       25
#   attention        the attention kernels timed, and PyTorch's SDPA          60
#   gpt2-graphs      GPT-2 with --cuda-graphs                                 40
#   char-fleet, char-torch   the shakespeare-char config, both sides          60
#   train-monitor    a short run with every monitor on (auto batch,
#                    telemetry, TensorBoard), and tb-check                    80
#   nvml, smi        NVML and fleet smi                                       20
#   nvrtc-all        every kernel compiled with this machine's NVRTC          120
# A stage runs only where the call's time left covers its budget; the rest
# are listed as not run. Everything goes under OUT (default .gpu/results):
# each stage's log, the JSON results, the kernel cache, the runs, the
# TensorBoard files, PyTorch's compile caches. The script prints one screen:
# OUT/SUMMARY.txt, rewritten after every stage, so that a call cut short
# still leaves it.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
G=.gpu
OUT=${2:-$G/results}
BUDGET=${BUDGET:-450} # seconds for the stages, under the call's 8 minutes

build() (
  set -e
  mkdir -p "$G"
  export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
  for pkg in backend/gpu backend/gpu/cuda/driver backend/gpu/cuda/nvrtc monitor/nvml monitor/sysstat; do
    go test -c -o "$G/$(echo "$pkg" | tr / _).test" "./$pkg"
  done
  go build -o "$G/fleet" ./cmd/fleet
  if [ -z "${NO_PREBUILD:-}" ]; then
    # Every kernel file for sm_80 and sm_90, with this machine's NVRTC; a
    # GPU machine's driver takes the cubins where it can (a newer driver
    # loads an older compiler's cubin for its architecture).
    rm -rf "$G/kernels"
    FLEET_PREBUILD_KERNELS="$PWD/$G/kernels" go test ./backend/gpu/cuda/nvrtc -run '^TestCompileKernels$' -count=1 -v >"$G/prebuild.log" 2>&1 ||
      echo "prebuilt kernels: see $G/prebuild.log (the GPU machine will compile them)"
    ls "$G/kernels" 2>/dev/null | grep -c . | sed 's/^/prebuilt kernel images: /'
  fi
  if [ -f ../shared/data/tinyshakespeare.txt ]; then
    mkdir -p "$G/data" && cp ../shared/data/tinyshakespeare.txt "$G/data/"
  fi
)

# The GPU and the simulated model that predicts it.
gpu_name() {
  if [ -n "${DRY:-}" ]; then echo "NVIDIA H100 80GB HBM3 (simulated)"; return; fi
  nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1
}
sim_model() {
  case "$1" in
    *H200*) echo h200 ;;
    *H100*) echo h100 ;;
    *A100*) echo a100 ;;
    *) echo "" ;;
  esac
}

declare -a rows
T0=$SECONDS

# stage NAME BUDGET CMD...: runs CMD under its budget (or what is left of the
# call's, if less; not at all if that is less than the budget's half) with
# its output in OUT/NAME.log, and records ok, FAIL, TIMEOUT, skip (every
# test skipped) or not-run for the summary.
stage() {
  local name=$1 budget=$2; shift 2
  local left=$((BUDGET - (SECONDS - T0))) limit=$budget t0=$SECONDS st
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt $((budget / 2)) ] || [ "$limit" -le 5 ]; then
    rows+=("$(printf '%-15s %-8s %5s %5ss' "$name" "not-run" "-" "$budget")")
    summary
    return 1
  fi
  timeout --kill-after=5 "$limit" bash -c '"$@"' bash "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  case $rc in
    0) st=ok ;;
    124 | 137) st=TIMEOUT ;;
    *) st=FAIL ;;
  esac
  if grep -q -- '--- SKIP' "$OUT/$name.log" && ! grep -q -- '--- PASS' "$OUT/$name.log" && [ $st = ok ]; then
    st=skip
  fi
  local tests=""
  if grep -qE -- '^\s*--- (PASS|FAIL|SKIP)' "$OUT/$name.log"; then
    tests=$(printf '%d passed, %d failed, %d skipped' "$(grep -cE -- '^--- PASS' "$OUT/$name.log")" \
      "$(grep -cE -- '^--- FAIL' "$OUT/$name.log")" "$(grep -cE -- '^--- SKIP' "$OUT/$name.log")")
  fi
  rows+=("$(printf '%-15s %-8s %4ds %5ss  %s' "$name" "$st" $((SECONDS - t0)) "$budget" "$tests")")
  summary
  return $rc
}

# testbin PKGDIR BIN ARGS...: a test binary, run from its package folder.
testbin() { local dir=$1 bin=$2; shift 2; (cd "$dir" && "$OLDPWD/$G/$bin" "$@"); }

GPT2=(--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --batch-size 16 --vocab-size 50304)
CHAR=(--n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 --vocab-size 65)

# fleetbench NAME FLAGS...: fleet's step on the device (DEV), and the
# simulated model's prediction of it (SIM) where there is one.
fleetbench() {
  local name=$1; shift
  if [ -n "$SIM" ]; then
    "$G/fleet" bench --device "sim:$SIM" --precision bf16 --steps 3 --warmup 2 --matmuls=false \
      --json "$OUT/predicted-$name.json" "$@" || return 1
  fi
  if [ "$DEV" != "sim:$SIM" ]; then
    "$G/fleet" bench --device "$DEV" --precision bf16 --steps 20 --warmup 5 --matmuls=false --json "$OUT/fleet-$name.json" "$@"
  fi
}

# torchbench NAME FLAGS...: the same step in PyTorch (--compile for
# torch.compile), MFU against the peak fleet's run found.
torchbench() {
  local name=$1; shift
  if [ -n "${DRY:-}" ]; then
    echo "--- SKIP: dry run: no PyTorch on a GPU here"
    return 0
  fi
  local peak
  peak=$(python3 -c 'import json,sys
try:
    r = json.load(open(sys.argv[1])); print("%.1f" % (r["gflops"] / 1e3 / r["mfu"]))
except Exception:
    print(989.4)' "$OUT/fleet-gpt2.json")
  python3 scripts/torch_gpu_bench.py --peak-tflops "$peak" "$@" >"$OUT/torch-$name.json"
}

shakespeare_data() {
  [ -f "$G/data/tinyshakespeare.txt" ] && echo "$G/data/tinyshakespeare.txt" && return
  echo ""
}

trainmonitor() {
  rm -rf "$OUT/monitor-run" "$OUT/tb" # fleet train refuses a folder that holds a run
  "$G/fleet" train --device "$DEV" --precision bf16 --batch-size auto --tokens-per-step 65536 \
    --max-iters 40 --eval-interval 20 --eval-iters 5 --log-interval 5 --out "$OUT/monitor-run" --tensorboard "$OUT/tb" &&
    if [ -z "${DRY:-}" ]; then python3 scripts/tb_check.py "$OUT/tb"; fi
}

# summary writes OUT/SUMMARY.txt: the stages so far and the GPT-2 table.
summary() {
  {
    local model=none
    [ -n "$SIM" ] && model=sim:$SIM
    printf 'fleet gpu-check%s on %s | simulated model: %s | %ds of %ds\n\n' "${DRY:+ (dry run)}" "$NAME" "$model" \
      $((SECONDS - T0)) "$BUDGET"
    printf '%-15s %-8s %5s %6s  %s\n' stage status time budget tests
    printf '%s\n' "${rows[@]}"
    echo
    python3 - "$OUT" "$SIM" <<'PY'
import json, os, sys
out, sim = sys.argv[1], sys.argv[2]
def load(name):
    try:
        return json.load(open(os.path.join(out, name)))
    except Exception:
        return None
def row(label, ms, tps, mfu, palm, note=""):
    na = lambda v, f: "n/a" if v is None else f(v)
    print("  %-20s %9s %11s %7s %7s  %s" % (label, na(ms, "{:.2f}".format), na(tps, "{:,.0f}".format),
                                           na(mfu, lambda v: "%.1f%%" % (100 * v)), na(palm, lambda v: "%.1f%%" % (100 * v)), note))
for cfg, title in (("gpt2", "GPT-2 124M, bf16, B 16, T 1024"), ("char", "shakespeare-char 6L/384, bf16, B 64, T 256")):
    f, p = load("fleet-%s.json" % cfg), load("predicted-%s.json" % cfg)
    te, tc = load("torch-%s.json" % cfg), load("torch-%s-compile.json" % cfg)
    if not any((f, p, te, tc)):
        continue
    print("%s (MFU in llm.c's 6N+6LCT units; PaLM's 6N+12LCT beside)" % title)
    print("  %-20s %9s %11s %7s %7s" % ("", "ms/step", "tokens/s", "MFU", "PaLM"))
    if f:
        row("fleet", f.get("ms_per_step"), f.get("tokens_per_sec"), f.get("mfu"), f.get("mfu_palm"))
    g = load("fleet-%s-graphs.json" % cfg)
    if g:
        row("fleet --cuda-graphs", g.get("ms_per_step"), g.get("tokens_per_sec"), g.get("mfu"), g.get("mfu_palm"))
    if p:
        row("predicted (sim:%s)" % sim, p.get("predicted_ms_per_step"), p.get("predicted_tokens_per_sec"),
            p.get("predicted_mfu"), p.get("predicted_mfu_palm"), "the cost model, no GPU")
    for t, label in ((te, "pytorch eager"), (tc, "pytorch compiled")):
        if t:
            pct = lambda k: t[k] / 100 if k in t else None
            row(label, t.get("ms_per_step"), t.get("tokens_per_s"), pct("mfu"), pct("mfu_palm"))
    print()
PY
    echo "logs and results: $OUT"
  } >"$OUT/SUMMARY.txt" 2>&1
}

checks() {
  T0=$SECONDS # the budget is the stages' (a dry run's build comes before)
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  # Caches and runs stay under OUT.
  export FLEET_KERNEL_CACHE="$OUT/kernel-cache" XDG_CACHE_HOME="$OUT/cache"
  export TORCHINDUCTOR_CACHE_DIR="$OUT/torch-inductor" TRITON_CACHE_DIR="$OUT/triton"
  if [ -d "$G/kernels" ]; then export FLEET_KERNEL_PREBUILT="$PWD/$G/kernels"; fi
  NAME=$(gpu_name)
  SIM=$(sim_model "$NAME")
  DEV=cuda
  [ -n "${DRY:-}" ] && DEV=sim:$SIM
  export G OUT DEV SIM DRY
  export -f testbin fleetbench torchbench trainmonitor
  rm -f "$OUT"/*.json
  rows=()
  stage doctor 20 "$G/fleet" doctor
  stage gpt2-fleet 75 fleetbench gpt2 "${GPT2[@]}"
  stage gpt2-torch 60 torchbench gpt2 "${GPT2[@]}"
  stage gpt2-compile 150 torchbench gpt2-compile "${GPT2[@]}" --compile
  stage gpu-tests 90 testbin backend/gpu backend_gpu.test -test.v \
    -test.run '^(TestGPUAttentionTensorCores|TestOpsOnGPU|TestGPTOnGPU|TestTrainerStepWithGraphsOnGPU)$'
  stage driver-tests 25 testbin backend/gpu/cuda/driver backend_gpu_cuda_driver.test -test.run '^TestGPU' -test.v
  stage attention 60 bash -c 'testbin backend/gpu backend_gpu.test -test.run "^$" -test.bench GPUAttention -test.benchtime 20x -test.v &&
    if [ -z "${DRY:-}" ]; then python3 scripts/torch_sdpa_bench.py; fi'
  stage gpt2-graphs 40 fleetbench gpt2-graphs "${GPT2[@]}" --cuda-graphs
  stage char-fleet 30 fleetbench char "${CHAR[@]}"
  stage char-torch 30 torchbench char "${CHAR[@]}"
  stage train-monitor 80 trainmonitor
  stage nvml 10 testbin monitor/nvml monitor_nvml.test -test.run 'DriverAndDevices' -test.v
  stage smi 10 "$G/fleet" smi
  stage nvrtc-all 120 testbin backend/gpu/cuda/nvrtc backend_gpu_cuda_nvrtc.test -test.run '^TestCompileKernels$' -test.v
  summary
  cat "$OUT/SUMMARY.txt"
}

case "$mode" in
  build) build ;;
  run) checks ;;
  dry-run)
    # What the call would do, against the simulated H100: the same stages,
    # budgets and summary. The test binaries are built where missing
    # (without the prebuilt kernels: NO_PREBUILD=1 scripts/gpu-check.sh build).
    [ -x "$G/fleet" ] && [ -x "$G/backend_gpu.test" ] || NO_PREBUILD=1 build >/dev/null
    DRY=1 checks
    ;;
  *)
    sed -n '2,36p' "$0"
    exit 2
    ;;
esac
