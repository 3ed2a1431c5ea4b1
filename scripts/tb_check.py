#!/usr/bin/env python3
"""Load a directory of TensorBoard event files with TensorBoard's own reader
and print what it found: each scalar tag with its number of points, first
and last step and last value, and each text tag with its number of entries.

NOT YET RUN AGAINST A REAL TENSORBOARD: the machine this was written on has
no tensorboard package. The files fleet writes (monitor/tfevents) were
checked there by parsing them with the protobuf runtime and a schema of the
same field numbers, and this script's own logic was run there against a
stand-in reader with EventAccumulator's methods; this script is the check
with TensorBoard itself.

Usage:
    python3 scripts/tb_check.py DIR [--expect TAG=COUNT ...]

A sample directory comes from the writer's tests:
    TFEVENTS_SAMPLE_DIR=/tmp/tb go test -run TestSample ./monitor/tfevents
    python3 scripts/tb_check.py /tmp/tb --expect train/loss=100 --expect lr=100 --expect samples=3

Exits 1 when a --expect tag is missing or has another count, or when the
directory holds no scalars at all; 2 when tensorboard is not installed.
"""

import argparse
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="directory holding events.out.tfevents.* files")
    ap.add_argument("--expect", action="append", default=[], metavar="TAG=COUNT",
                    help="fail unless TAG (scalar or text) has COUNT entries")
    args = ap.parse_args()

    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    except ImportError as e:
        print(f"tb_check: tensorboard is not importable: {e}", file=sys.stderr)
        return 2

    # size_guidance 0 keeps every point instead of a reservoir sample.
    acc = EventAccumulator(args.dir, size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()

    counts = {}
    scalar_tags = sorted(tags.get("scalars", []))
    print(f"scalars: {len(scalar_tags)} tags")
    for tag in scalar_tags:
        pts = acc.Scalars(tag)
        counts[tag] = len(pts)
        print(f"  {tag}: {len(pts)} points, steps {pts[0].step}..{pts[-1].step}, "
              f"last {pts[-1].value:.6g} at wall time {pts[-1].wall_time:.3f}")

    try:
        text_tags = sorted(acc.PluginTagToContent("text").keys())
    except KeyError:  # no summary named the text plugin
        text_tags = []
    print(f"text: {len(text_tags)} tags")
    for tag in text_tags:
        evs = acc.Tensors(tag)
        counts[tag] = len(evs)
        last = evs[-1].tensor_proto
        body = last.string_val[0].decode("utf-8", "replace") if last.string_val else ""
        print(f"  {tag}: {len(evs)} entries, last at step {evs[-1].step}: {body[:80]!r}")

    ok = bool(scalar_tags)
    if not ok:
        print("tb_check: no scalars found", file=sys.stderr)
    for exp in args.expect:
        tag, _, n = exp.rpartition("=")
        if not tag or not n.isdigit():
            print(f"tb_check: bad --expect {exp!r}, want TAG=COUNT", file=sys.stderr)
            return 1
        got = counts.get(tag)
        if got != int(n):
            print(f"tb_check: {tag}: {got} entries, want {n}", file=sys.stderr)
            ok = False
    print("tb_check: ok" if ok else "tb_check: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
