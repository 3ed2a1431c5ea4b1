#!/usr/bin/env python3
"""Writes the GPT-2 tokenizer fixtures of package tokenizer from an
independent reference: GPT-2's own encoder algorithm (OpenAI's
gpt-2/src/encoder.py, restated here), run with Python's `regex` module,
whose \\s is Unicode White_Space as in tiktoken.

Usage (from the repo root; scripts/gpt2_fixture.sh runs it):

    python3 scripts/gpt2_fixture.py VOCAB_DIR

VOCAB_DIR holds GPT-2's encoder.json and vocab.bpe. Needs the `regex`
module (Debian: python3-regex). Writes

    testdata/gpt2_sample_ids.txt  the ids of testdata/gpt2_sample.txt
    testdata/gpt2_cases.json      short edge cases and their ids

Both are pure functions of the vocabulary and the texts, so rerunning
reproduces them byte for byte.
"""
import json
import os
import sys

import regex

PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable characters."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


class GPT2:
    def __init__(self, vocab_dir):
        with open(os.path.join(vocab_dir, "encoder.json"), encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(os.path.join(vocab_dir, "vocab.bpe"), encoding="utf-8") as f:
            lines = f.read().split("\n")
        merges = [tuple(l.split()) for l in lines[1:] if l]
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.pat = regex.compile(PATTERN)
        self.cache = {}

    def bpe(self, token):
        """Merges the lowest-ranked pair (every occurrence, left to right)
        until no pair has a merge; returns the tokens."""
        if token in self.cache:
            return self.cache[token]
        word = list(token)
        while len(word) > 1:
            pairs = {(word[i], word[i + 1]) for i in range(len(word) - 1)}
            best = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if best not in self.ranks:
                break
            first, second = best
            out, i = [], 0
            while i < len(word):
                if i < len(word) - 1 and word[i] == first and word[i + 1] == second:
                    out.append(first + second)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            word = out
        self.cache[token] = word
        return word

    def pieces(self, text):
        return regex.findall(self.pat, text)

    def encode(self, text):
        ids = []
        for piece in self.pieces(text):
            mapped = "".join(self.byte_encoder[b] for b in piece.encode("utf-8"))
            ids.extend(self.encoder[t] for t in self.bpe(mapped))
        return ids


# Edge cases: every whitespace-like character in the contexts where the
# regex treats whitespace and other characters differently, plus
# contractions, numbers and punctuation.
SPACES = ["\t", "\n", "\v", "\f", "\r", " ", "\x85", "\xa0", "\u1680", "\u2000", "\u2009",
          "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
          # not White_Space:
          "\u200b", "\ufeff", "\x1c", "\u180e"]
CONTEXTS = ["a{0}b", "a{0}{0}b", "a{0} b", "a {0}b", "a{0}{0}{0} b", "!{0}!", "1{0}2", "{0}", "{0}{0}",
            "a{0}", "a {0}", "{0}a", "{0} a", " {0}{0}a", "{0}\n", "\n{0}", "x{0}'s"]
OTHER = [
    "", "a", " ", "  ", "   ", "\n", "\n\n", " \n", "\n ", "\r\n", "\r\n\r\n", " \r\n",
    "hello world", "hello  world", "hello   world", "hello \nworld", "hello\n world", "hello\t world", "hello \tworld",
    "it's", "It's", "IT'S", "can't", "we're", "they've", "I'm", "you'll", "he'd", "'s", " 's", "''s", "'", "'re'", "'ll've",
    "x'", "x'l", "x'll", "x're", "x'r", "don't!", "rock'n'roll", "‘curly’s", "y’all",
    "123", " 123", "1234567890123", "3.14", "1,000", "a1", "1a", "²", "x²", "Ⅻ", "٣٤", "12 34", "12  34",
    "!!!", " !!!", "...", "?!", "a.b", "a. b", "a .b", "(x)", " (x) ", "--", " --", "—", "“a”",
    "😀", " 😀", "😀😀", "👨‍👩‍👧", "🇫🇷", "a😀b", "\u2764\ufe0f",
    "é", "e\u0301", "Straße", " Straße", "日本語", " 日本語", "한국어", "العربية", "हिन्दी", "ภาษาไทย",
    "<|endoftext|>", " <|endoftext|>",
    "\t\t", "\t\ta", " \t a", "a\t", "a \t", "\r", "a\rb", "a\r\nb", "a \r\nb",
    "    def f():\n        return 1\n",
]


def cases():
    seen, out = set(), []
    for s in SPACES:
        for c in CONTEXTS:
            t = c.format(s)
            if t not in seen:
                seen.add(t)
                out.append(t)
    for t in OTHER:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: gpt2_fixture.py VOCAB_DIR (holding encoder.json and vocab.bpe)")
    enc = GPT2(sys.argv[1])
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata")
    with open(os.path.join(here, "gpt2_sample.txt"), encoding="utf-8", newline="") as f:
        sample = f.read()
    ids = enc.encode(sample)
    with open(os.path.join(here, "gpt2_sample_ids.txt"), "w", encoding="ascii", newline="\n") as f:
        for i in range(0, len(ids), 16):
            f.write(" ".join(map(str, ids[i:i + 16])) + "\n")
    rows = [{"text": t, "ids": enc.encode(t)} for t in cases()]
    with open(os.path.join(here, "gpt2_cases.json"), "w", encoding="ascii", newline="\n") as f:
        f.write("[\n")
        f.write(",\n".join(json.dumps(r, ensure_ascii=True) for r in rows))
        f.write("\n]\n")
    print(f"gpt2_sample_ids.txt: {len(ids)} ids for {len(sample.encode())} bytes; gpt2_cases.json: {len(rows)} cases")


if __name__ == "__main__":
    main()
