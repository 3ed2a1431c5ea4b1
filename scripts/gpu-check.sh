#!/usr/bin/env bash
# GPU checks for fleet, in one device call. The GPU machine has no Go, so:
#
#   scripts/gpu-check.sh build   here: builds the GPU test binaries and fleet
#                                (CGO_ENABLED=0, linux/amd64) into .gpu/, and
#                                copies the Shakespeare corpus there if found
#   scripts/gpu-check.sh quick   there: GPU test suite, fleet doctor, and the
#                                side-by-side benchmark with PyTorch (< 5 min)
#   scripts/gpu-check.sh full    there: nanoGPT's shakespeare-char run, 5000
#                                iterations, on its own
#
# Carry .gpu to the device machine and run quick or full from the repository
# root. Each step's output goes to .gpu/logs/; a short table ends the run.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
G=.gpu

build() {
  set -e
  mkdir -p "$G"
  export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
  for pkg in backend/cuda backend/cuda/driver backend/cuda/nvrtc backend/cuda/cublas monitor/nvml monitor/sysstat; do
    go test -c -o "$G/$(echo "$pkg" | tr / _).test" "./$pkg"
  done
  go build -o "$G/fleet" ./cmd/fleet
  if [ -f ../shared/data/tinyshakespeare.txt ]; then
    mkdir -p "$G/data" && cp ../shared/data/tinyshakespeare.txt "$G/data/"
  fi
  ls -l "$G"
}

# run NAME CMD...: runs a step, logs it, and records pass/fail for the table.
declare -a rows
run() {
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$G/logs/$name.log" 2>&1; then st=ok; else st=FAIL; fi
  if [ $st = ok ] && grep -q -- '--- SKIP' "$G/logs/$name.log" && ! grep -q -- '--- PASS' "$G/logs/$name.log"; then
    st=skip # every test skipped: no GPU
  fi
  rows+=("$(printf '%-34s %-5s %4ds' "$name" "$st" $((SECONDS - t0)))")
  tail -n 3 "$G/logs/$name.log" | sed "s/^/  [$name] /"
}

# testbin PKGDIR BIN ARGS...: a test binary, run from its package folder.
testbin() { local dir=$1 bin=$2; shift 2; (cd "$dir" && "$OLDPWD/$G/$bin" "$@"); }

# fleetbench CONFIG FLAGS...: one fleet bench row.
fleetbench() {
  local name=$1; shift
  "$G/fleet" bench --device cuda --precision bf16 --steps 30 --warmup 10 --matmuls=false "$@" >"$G/logs/fleet-$name.log" 2>&1
  local rc=$?
  local line mfu
  line=$(grep 'tokens/s' "$G/logs/fleet-$name.log")
  mfu=$(grep -o 'MFU [0-9.]*%' "$G/logs/fleet-$name.log" | head -1)
  bench+=("$(printf '%-8s %-36s %s | %s' "$name" "fleet bf16" "$line" "$mfu")")
  return $rc
}

torchbench() {
  local name=$1; shift
  local out
  out=$(python3 scripts/torch_gpu_bench.py "$@" 2>"$G/logs/torch-$name.err") || { bench+=("$name pytorch failed: $(tail -1 "$G/logs/torch-$name.err")"); return 1; }
  bench+=("$(printf '%-8s %s' "$name" "$out")")
}

quick() {
  mkdir -p "$G/logs"
  declare -a bench
  nvidia-smi -L 2>/dev/null || true
  run doctor "$G/fleet" doctor
  run gpu-suite testbin backend/cuda backend_cuda.test -test.run 'GPU' -test.v
  run driver-gpu testbin backend/cuda/driver backend_cuda_driver.test -test.run 'TestGPU' -test.v
  run nvrtc testbin backend/cuda/nvrtc backend_cuda_nvrtc.test -test.v
  run nvml testbin monitor/nvml monitor_nvml.test -test.run 'DriverAndDevices' -test.v
  run gpu-sampler testbin monitor/sysstat monitor_sysstat.test -test.run 'GPUSampler' -test.v
  run smi "$G/fleet" smi
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
  run fleet-bench-b fleetbench gpt2 "${B[@]}"
  run torch-bench-b torchbench gpt2 "${B[@]}"
  echo; echo "== steps"; printf '%s\n' "${rows[@]}"
  echo; echo "== benchmark (medians of 30 steps after 10; MFU against 989 TFLOP/s dense bf16)"
  printf '%s\n' "${bench[@]}"
}

full() {
  mkdir -p "$G/logs"
  local data=$G/data/tinyshakespeare.txt
  [ -f "$data" ] || { echo "no $data: run build where ../shared/data has it"; exit 1; }
  # nanoGPT's config/train_shakespeare_char.py (it reports val loss 1.4697).
  rm -rf "$G/shakespeare-char" # a rerun starts afresh (fleet train refuses a folder that holds a run)
  "$G/fleet" train --device cuda --precision bf16 --data "$data" --out "$G/shakespeare-char" \
    --n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 --dropout 0.2 \
    --lr 1e-3 --min-lr 1e-4 --beta2 0.99 --warmup-iters 100 --max-iters 5000 --lr-decay-iters 5000 \
    --eval-interval 250 --eval-iters 200 --log-interval 50 2>&1 | tee "$G/logs/full.log" | grep -E 'eval|done'
}

case "$mode" in
  build) build ;;
  quick) quick ;;
  full) full ;;
  *) sed -n '2,14p' "$0"; exit 2 ;;
esac
