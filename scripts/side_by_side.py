#!/usr/bin/env python3
"""fleet against PyTorch on the CPU, under the fair protocol.

1. PyTorch's fp32 products go through OpenBLAS, which picks its kernel from
   the CPU model and does not know every new one. So first each
   OPENBLAS_CORETYPE (unset, SkylakeX, Cooperlake, Haswell) is timed on a
   short run, and the fastest is kept; OPENBLAS_VERBOSE=2 names the core
   it ran. (bf16 under autocast goes through oneDNN and is timed as is.)
2. Then fleet and PyTorch train the same configuration, alternating, for
   --rounds rounds, and the medians of their tokens per second are
   compared: fleet's from summary.json, PyTorch's from
   scripts/torch_reference.py, both the median over steps of each step's
   tokens / its time, evaluation excluded.

Both run with OMP_NUM_THREADS at the machine's cores and
OPENBLAS_NUM_THREADS=1 (OpenBLAS threads on top of OpenMP oversubscribe
the cores). Run from the repository root, for example:

  go build -o /tmp/fleet ./cmd/fleet
  python3 scripts/side_by_side.py --fleet /tmp/fleet --data ../shared/data/tinyshakespeare.txt \\
      --config ref --precision fp32 --rounds 3

It prints one JSON object last: the configuration, the OpenBLAS core,
every round's figures, the medians and the ratio. It needs torch (Debian's
python3-torch with libopenblas0-pthread).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

CONFIGS = {
    # nanoGPT's CPU reference run (the README's), and a larger one.
    "ref": {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "batch_size": 12},
    "6x384": {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 128, "batch_size": 8},
}
CORETYPES = ["", "SkylakeX", "Cooperlake", "Haswell"]


def torch_cmd(args, cfg, iters):
    return [args.python, "scripts/torch_reference.py", "--data", args.data,
            "--n-layer", str(cfg["n_layer"]), "--n-head", str(cfg["n_head"]), "--n-embd", str(cfg["n_embd"]),
            "--block-size", str(cfg["block_size"]), "--batch-size", str(cfg["batch_size"]),
            "--max-iters", str(iters), "--eval-interval", str(10 * iters), "--eval-iters", "1",
            "--autocast", "bf16" if args.precision == "bf16" else "none"]


def fleet_cmd(args, cfg, iters, out):
    return [args.fleet, "train", "--data", args.data, "--device", "cpu", "--precision", args.precision,
            "--n-layer", str(cfg["n_layer"]), "--n-head", str(cfg["n_head"]), "--n-embd", str(cfg["n_embd"]),
            "--block-size", str(cfg["block_size"]), "--batch-size", str(cfg["batch_size"]),
            "--bias=false", "--dropout", "0", "--lr", "1e-3", "--min-lr", "1e-4", "--beta2", "0.99",
            "--warmup-iters", "100", "--max-iters", str(iters), "--eval-interval", str(10 * iters),
            "--eval-iters", "1", "--ckpt-interval", "0", "--out", out]


def env_for(coretype, verbose=False):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(os.cpu_count())
    env["OPENBLAS_NUM_THREADS"] = "1"
    env.pop("OPENBLAS_L2_SIZE", None)
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    if verbose:
        env["OPENBLAS_VERBOSE"] = "2"
    return env


def run_torch(args, cfg, iters, coretype):
    p = subprocess.run(torch_cmd(args, cfg, iters), env=env_for(coretype, verbose=True),
                       capture_output=True, text=True, check=True)
    core = re.search(r"Core:\s*(\S+)", p.stderr + p.stdout)
    result = json.loads(p.stdout.strip().splitlines()[-1])
    return result["tokens_per_sec"], core.group(1) if core else "?"


def run_fleet(args, cfg, iters):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "run")
        subprocess.run(fleet_cmd(args, cfg, iters, out), env=env_for(""), capture_output=True, text=True, check=True)
        with open(os.path.join(out, "summary.json")) as f:
            return json.load(f)["tokens_per_sec"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fleet", required=True, help="the fleet binary")
    ap.add_argument("--data", required=True)
    ap.add_argument("--python", default="/usr/bin/python3", help="the Python that has torch")
    ap.add_argument("--config", choices=sorted(CONFIGS), default="ref")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=0, help="steps per timed run (default: 300 for ref, 60 for 6x384)")
    ap.add_argument("--probe-iters", type=int, default=0, help="steps per OpenBLAS core probe (default: a third of --iters)")
    args = ap.parse_args()
    cfg = CONFIGS[args.config]
    iters = args.iters or (300 if args.config == "ref" else 60)
    probe = args.probe_iters or max(iters // 3, 20)

    coretype, core, probes = "", "?", {}
    if args.precision == "fp32":
        for ct in CORETYPES:
            rate, named = run_torch(args, cfg, probe, ct)
            probes[ct or "unset"] = {"tokens_per_sec": rate, "core": named}
            print(f"OPENBLAS_CORETYPE={ct or '(unset)'}: core {named}, {rate:.0f} tokens/s", file=sys.stderr, flush=True)
        best = max(probes, key=lambda k: probes[k]["tokens_per_sec"])
        coretype = "" if best == "unset" else best
        core = probes[best]["core"]
    rounds = []
    for i in range(args.rounds):
        f = run_fleet(args, cfg, iters)
        t, named = run_torch(args, cfg, iters, coretype)
        core = named
        rounds.append({"fleet": f, "torch": t})
        print(f"round {i + 1}: fleet {f:.0f}, PyTorch {t:.0f} tokens/s ({f / t:.2f}x)", file=sys.stderr, flush=True)
    fm = statistics.median(r["fleet"] for r in rounds)
    tm = statistics.median(r["torch"] for r in rounds)
    print(json.dumps({"config": args.config, **cfg, "precision": args.precision, "iters": iters,
                      "openblas_coretype": coretype or "unset", "openblas_core": core, "probes": probes,
                      "rounds": rounds, "fleet_median": fm, "torch_median": tm, "ratio": fm / tm}))


if __name__ == "__main__":
    main()
