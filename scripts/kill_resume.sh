#!/usr/bin/env bash
# Acceptance check for checkpoints: train a 200-step run uninterrupted, then
# the same run again, killed with SIGKILL at random moments and resumed with
# --resume until it finishes; the two model.safetensors must be identical.
#
# Usage (from the repo root): scripts/kill_resume.sh DATA [KILLS] [extra fleet train flags...]
# e.g. scripts/kill_resume.sh tinyshakespeare.txt 5
set -euo pipefail
data=${1:?usage: scripts/kill_resume.sh DATA [KILLS] [flags...]}
kills=${2:-5}
shift $(( $# >= 2 ? 2 : 1 ))
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/fleet" ./cmd/fleet
flags=(train --data "$data" --device cpu --max-iters 200 --ckpt-interval 10 "$@")

start=$(date +%s.%N)
"$work/fleet" "${flags[@]}" --out "$work/a" > "$work/a.log" 2>&1
full=$(echo "$(date +%s.%N) - $start" | bc)
echo "uninterrupted: ${full}s"

n=0
while :; do
	"$work/fleet" "${flags[@]}" --out "$work/b" --resume >> "$work/b.log" 2>&1 &
	pid=$!
	if (( n < kills )); then
		# Sleep 15-45% of the uninterrupted time, then SIGKILL.
		pct=$((15 + RANDOM % 31))
		d=$(echo "$full * $pct / 100" | bc -l)
		sleep "$d"
		if kill -9 "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null || true
			n=$((n + 1))
			latest=$(cat "$work/b/checkpoints/latest" 2>/dev/null || echo none)
			printf 'kill %d after %.2fs: latest checkpoint %s\n' "$n" "$d" "$latest"
			continue
		fi
	fi
	wait "$pid"
	break
done
grep -h "checkpoint step" "$work/b.log" | tail -3
if cmp "$work/a/model.safetensors" "$work/b/model.safetensors"; then
	echo "OK: after $n kills and resumes, model.safetensors is bit-identical to the uninterrupted run's"
else
	echo "FAIL: model.safetensors differs" >&2
	exit 1
fi
