// Second opinion on the GPT-2 fixtures that scripts/gpt2_fixture.py wrote:
// encodes testdata/gpt2_sample.txt and every case of testdata/gpt2_cases.json
// with tiktoken (the npm package: tiktoken's Rust core compiled to
// WebAssembly, r50k_base) and fails if any id differs. It also reports where
// gpt-3-encoder (a JavaScript port of GPT-2's encoder.py) differs: its regex
// runs on JavaScript's \s, which leaves out U+0085 and takes in U+FEFF,
// unlike Python's regex and tiktoken (Unicode White_Space).
//
// Usage (from the repo root; scripts/gpt2_fixture.sh runs it):
//   NODE_PATH=DIR/node_modules node scripts/gpt2_fixture_check.cjs
const fs = require("fs");
const path = require("path");
const { get_encoding } = require("tiktoken");
const gpt3 = require("gpt-3-encoder");

const testdata = path.join(__dirname, "..", "testdata");
const sample = fs.readFileSync(path.join(testdata, "gpt2_sample.txt"), "utf8");
const want = fs.readFileSync(path.join(testdata, "gpt2_sample_ids.txt"), "ascii").trim().split(/\s+/).map(Number);
const cases = JSON.parse(fs.readFileSync(path.join(testdata, "gpt2_cases.json"), "utf8"));

const enc = get_encoding("r50k_base");
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
let bad = 0;

const got = Array.from(enc.encode_ordinary(sample));
if (!same(got, want)) {
  bad++;
  const i = got.findIndex((x, i) => x !== want[i]);
  console.log(`tiktoken: sample differs at id ${i}: ${got.slice(i, i + 8)} vs ${want.slice(i, i + 8)}`);
}
for (const c of cases) {
  const g = Array.from(enc.encode_ordinary(c.text));
  if (!same(g, c.ids)) {
    bad++;
    console.log(`tiktoken: ${JSON.stringify(c.text)}: ${g} vs ${c.ids}`);
  }
}
console.log(`tiktoken: ${bad === 0 ? "agrees on" : "DISAGREES on"} the sample (${want.length} ids) and ${cases.length} cases`);

let g3 = 0;
if (!same(gpt3.encode(sample), want)) {
  g3++;
  console.log("gpt-3-encoder: differs on the sample");
}
for (const c of cases) {
  const g = gpt3.encode(c.text);
  if (!same(g, c.ids)) {
    g3++;
    const cps = Array.from(c.text).map((ch) => "U+" + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")).join(" ");
    console.log(`gpt-3-encoder differs: ${JSON.stringify(c.text)} [${cps}]: ${g} vs ${c.ids}`);
  }
}
console.log(`gpt-3-encoder: differs on ${g3} of ${cases.length + 1} texts (expected only where U+0085 or U+FEFF decides)`);
enc.free();
process.exit(bad === 0 ? 0 : 1);
