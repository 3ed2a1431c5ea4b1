// Package tokenizer turns text into token ids for fleet's models and back.
// Nothing here touches the network: every vocabulary is a file the user
// has or makes.
//
// # One interface
//
// Every tokenizer is a data.Tokenizer:
//
//	Encode(text string) ([]int32, error)
//	Decode(ids []int32) string
//	Size() int
//	EOT() (id int32, ok bool)
//	Spec() string
//
// fleet prepare (data.Prepare), the trainer (train.Tokenizer is the same
// type), fleet sample and eval, and fleet tokenizer all use it, and every
// implementation satisfies it directly, with no adapter: data.Char (the
// character tokenizer), BPE (a trained BPE, GPT-2's), HF (a Hugging Face
// tokenizer.json) and Raw (raw token ids). The interface lives in package data, not here, because the layers
// put data and tokenizer side by side and tokenizer imports data: Prepare
// and Char, which are data's, need the interface, and data must not import
// this package.
//
// # Specs
//
// A spec names a tokenizer. ParseSpec is the one parser of specs and Open
// the one function that opens them; fleet prepare, fleet train's
// --tokenizer, a prepared folder's manifest, a run's tokenizer.json, fleet
// sample and eval with --weights FILE, and fleet tokenizer all call Open:
//
//	char        the character vocabulary of the text at hand, which the
//	            caller builds (Options.Chars): fleet prepare's inputs,
//	            fleet eval's --data
//	char:FILE   nanoGPT's character tokenizer (data.Char), from the
//	            tokenizer.json that data.SaveChar wrote. One id per
//	            character; no end-of-text token.
//	bpe:FILE    a byte-level BPE that fleet trained itself (TrainBPE,
//	            BPE.Save; fleet tokenizer train).
//	gpt2:FILE   GPT-2's tokenizer from a tiktoken rank file
//	            (r50k_base.tiktoken).
//	gpt2:DIR    GPT-2's tokenizer from a folder holding GPT-2's
//	            encoder.json and vocab.bpe.
//	hf:FILE     a Hugging Face tokenizer.json (HF), with BOS and EOS from
//	            the tokenizer_config.json beside it when FILE is named
//	            tokenizer.json.
//	hf:DIR      a Hugging Face model folder's tokenizer.json and
//	            tokenizer_config.json.
//	none        raw token ids (Raw), of a vocabulary the caller knows
//	            (Options.VocabSize): no text to encode, ids decode as
//	            numbers.
//
// A relative path is relative to Options.Dir (a prepared folder names its
// tokenizer relative to itself) or else to the working directory; the
// Spec of an opened tokenizer has the path made absolute, so that a
// manifest or a run can record it and open it again from anywhere.
//
// # A run's tokenizer.json
//
// SaveRecord writes the tokenizer of a training run into its folder and
// LoadRecord opens it again: a char tokenizer as its vocabulary
// ({"type": "char", "chars": ...}, as data.SaveChar writes it), any other
// as its spec ({"type": "spec", "spec": SPEC, "vocab_size": N}), and raw
// token ids as {"type": "none", "vocab_size": N}, N being the model's
// vocabulary.
//
// bpe and gpt2 share one implementation, BPE: GPT-2's pre-tokenizer, then
// byte-level BPE within each pre-token, merging the adjacent pair of lowest
// rank (the leftmost if it occurs twice) until none is left, as GPT-2's
// encoder does. gpt2 gives exactly GPT-2's ids (the ids tiktoken's
// r50k_base gives); the tests hold it to independent references. Encoding
// caches the ids of recent pre-tokens, and long pre-tokens merge with a
// heap, so encoding is fast on any input. Every tokenizer here is safe for
// concurrent use, except that BPE.Save changes what Spec returns.
//
// # Pre-tokenization
//
// Text is first split by GPT-2's regular expression
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// with \s meaning Unicode White_Space, as in tiktoken and Python's regex
// module: \t \n \v \f \r, space, U+0085, U+00A0, U+1680, U+2000 to U+200A,
// U+2028, U+2029, U+202F, U+205F and U+3000 (exactly Go's unicode.IsSpace;
// not Go regexp's ASCII \s, and not JavaScript's, which adds U+FEFF and
// leaves out U+0085). Go's regexp cannot express the lookahead, so the
// expression is a hand-written state machine: a run of whitespace followed
// by a non-space gives its last character to the next piece, so that
// "a\u00a0 b" splits as "a", "\u00a0", " b", and a word after three spaces
// as two spaces and the word with one. Letters and digits are Unicode categories L and N in the tables of
// Go's unicode package (unicode.Version); a character assigned after that
// version is a symbol here. Bytes that are not valid UTF-8 are symbols too
// (as U+FFFD would be), so any bytes encode, and decode back unchanged.
//
// # Hugging Face tokenizer.json (hf:)
//
// HF runs a tokenizer.json as the Rust tokenizers library does, for the
// BPE models of today's open models:
//
//   - byte-level BPE: a ByteLevel pre-tokenizer, alone (GPT-2's
//     expression, use_regex), after Digits (SmolLM's, StarCoder's) or
//     after a Split with Llama 3's or Qwen2's expression (hand-written
//     matchers, hf_pretok.go; another expression is refused);
//   - Metaspace and byte-fallback BPE: Llama 2's, TinyLlama's and
//     Mistral's normalizer (Prepend "▁", Replace " " by "▁") or the newer
//     Metaspace pre-tokenizer (split false), byte_fallback with <0xNN>
//     tokens, unk_token and fuse_unk;
//   - normalizers NFC, NFD, NFKC and NFKD (Qwen2's NFC), Prepend and
//     Replace of a string; merges as "a b" strings or [a, b] pairs;
//     ignore_merges (Llama 3's); ids up to 2^24 (Llama 3's 128,256 and
//     Qwen2's 151,665), gaps allowed;
//   - added tokens, matched in the text first (leftmost, then longest),
//     special ones included, with lstrip, rstrip and normalized;
//   - decoders ByteLevel, Replace, ByteFallback, Fuse, Strip and
//     Metaspace.
//
// Anything else (Unigram or WordPiece models, other normalizers,
// pre-tokenizers, decoders or post-processors, single_word added tokens,
// dropout, subword affixes) is refused when the file is opened, with an
// error naming the field ("pre_tokenizer.pretokenizers[0]: ...").
// truncation and padding are ignored: they shape batches, not a stream.
//
// Encode adds no BOS or EOS and matches added tokens in the text, as
// Hugging Face's tokenizer(text) does with add_special_tokens=False. EOT is
// the folder's eos_token, so that documents are joined by EOS; BOS
// returns the bos_token when the folder adds one (add_bos_token, or a
// post-processor template that starts with a special token), for a caller
// that starts a sequence. Decode runs the file's decoder, without the
// clean-up of spaces before punctuation, and keeps bytes that are not
// UTF-8 as bytes. HF's split points (HF.SplitPoint, which EncodeReader
// and fleet prepare use through SplitPointOf) follow its pre-tokenizer's
// expression, avoid added tokens and Unicode normalization, and must be
// followed by a space where a pre-tokenizer prepends one; a tokenizer
// whose normalizer prepends "▁" to every text (Llama 2's) has none, so
// each document is encoded whole.
//
// # Documents and the end-of-text token
//
// Encode never produces a special token, except with hf (above): the text
// "<|endoftext|>" is encoded as ordinary text. Documents (for example, the input files) are
// joined with the end-of-text token between them, which EncodeDocuments
// does and EOT returns: GPT-2's is 50256, a trained BPE's is its last id.
// char has none, and its documents are concatenated as they are.
//
// # Streaming
//
// Encode works on any piece of a text that ends where SplitPoint says: a
// pre-token boundary that no continuation can move (after a letter that is
// followed by a non-letter, for example). Encoding a stream chunk by chunk,
// each cut at SplitPoint and the rest carried into the next chunk, gives
// the ids of encoding it whole. EncodeReader does this for an io.Reader.
//
// # File formats
//
// A trained BPE (bpe:) is JSON:
//
//	{
//	  "type": "bpe",
//	  "version": 1,
//	  "pre_tokenizer": "gpt2",
//	  "vocab_size": 1024,
//	  "eot": 1023,
//	  "merges": [
//	    [32, 116],
//	    [104, 101],
//	    ...
//	  ]
//	}
//
// Ids 0 to 255 are the bytes 0 to 255. Merge i (from 0) joins the two ids
// it lists into id 256+i and has rank i: lower ranks merge first. Each
// merge may only use bytes and earlier merges, and no pair is merged
// twice. <|endoftext|> is the last id: eot = vocab_size-1 =
// 256+len(merges). Unknown fields are an error.
//
// A tiktoken rank file (gpt2:FILE) has one line per token: the token's
// bytes in standard base64, a space, and its rank, which is its id. Ranks
// run from 0 to n-1 without gaps or repeats, each single byte is a token,
// and <|endoftext|> is id n (50256 for r50k_base). The merges are recovered
// from the ranks: BPE of a token's bytes with the tokens of lower rank must
// give two tokens, which are its merge. For r50k_base these are exactly
// vocab.bpe's merges.
//
// GPT-2's encoder.json maps each token, its bytes written in GPT-2's
// printable byte alphabet (bytes_to_unicode), to its id, with
// "<|endoftext|>" as the end-of-text token; vocab.bpe has a "#version"
// line and then one merge "A B" per line, in rank order.
//
// Every vocabulary must fit token shards' uint16 ids: at most MaxVocab
// (65535) ids, the end-of-text token included. Files that break any rule
// above are refused with an error naming the file and the line or entry.
package tokenizer
