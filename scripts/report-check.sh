#!/usr/bin/env bash
# The report's check in a real browser: trains a small run on the CPU,
# makes its page with `fleet report`, has headless Chromium dump the DOM it
# builds and screenshot the page, then checks both (monitor/report's
# TestChromiumRendersReport on these files): the loss and throughput plots
# have lines of many points, and the plot colours are on screen.
#
#   scripts/report-check.sh [WORK_DIR]     # default: a new temporary folder
#
# Needs chromium (Debian: apt-get install -y chromium). Leaves the run, the
# page, the DOM and the screenshot in WORK_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

browser=${FLEET_CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [ -z "$browser" ]; then
  echo "no chromium on PATH (apt-get install -y chromium), nor \$FLEET_CHROMIUM" >&2
  exit 1
fi
work=${1:-$(mktemp -d)}
mkdir -p "$work"
work=$(cd "$work" && pwd)

go build -o "$work/fleet" ./cmd/fleet
# 60 steps logged every 2: lines of 30 points.
rm -rf "$work/run" # fleet train refuses a folder that holds a run
"$work/fleet" train --device cpu --max-iters 60 --eval-interval 20 --eval-iters 5 --log-interval 2 \
  --out "$work/run" >"$work/train.log" 2>&1 || { tail -20 "$work/train.log"; exit 1; }
[ -f "$work/run/telemetry.json" ] || echo "note: the run wrote no telemetry.json, so the page has no diagnosis"
"$work/fleet" report "$work/run" --out "$work/report.html"

chrome() {
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
    --user-data-dir="$work/profile" --window-size=1200,2400 "$@" "file://$work/report.html"
}
chrome --dump-dom >"$work/report.dom.html" 2>"$work/chromium.log"
chrome --screenshot="$work/report.png" 2>>"$work/chromium.log" >/dev/null
[ -s "$work/report.png" ] || { echo "chromium wrote no screenshot:"; tail "$work/chromium.log"; exit 1; }

FLEET_REPORT_DOM="$work/report.dom.html" FLEET_REPORT_PNG="$work/report.png" FLEET_REPORT_MIN_POINTS=25 \
  go test -count=1 -run '^TestChromiumRendersReport$' ./monitor/report
echo "report check passed: $work/report.html, screenshot $work/report.png"
