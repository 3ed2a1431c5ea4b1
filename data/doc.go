// Package data is fleet's data pipeline: text and token files in, the
// token windows the model trains and is evaluated on out.
//
// Text, as nanoGPT's shakespeare_char recipe reads it:
//
//   - LoadText reads the training text from a file or a folder of files
//     (ListFiles: sorted path order), refusing, by name, any file that is
//     not text (CheckText: a NUL byte, or more than MaxInvalidUTF8Share of
//     its bytes not valid UTF-8), such as a binary; DefaultCorpus builds a
//     ready-made corpus from the Go standard library source when the user
//     names none.
//   - Char is the character tokenizer: its vocabulary is the sorted set of
//     distinct characters in the text. It is saved as JSON next to a
//     checkpoint so that sampling decodes exactly what training encoded.
//   - Split divides the token stream into a training part (the first 90%)
//     and a validation part (the rest).
//
// Token files, in llm.c's format:
//
//   - A shard is a header of 256 little-endian int32 (magic 20240520,
//     version 1, the token count) and then the tokens as uint16; for a
//     vocabulary of more than 65,535 ids, llm.c's Llama 3 layout (magic
//     20240801, version 7) with uint32 tokens.
//     CreateShard and WriteShard write one atomically; OpenShard maps one
//     into memory and checks it; OpenTokenFile also reads nanoGPT's raw
//     uint16 files, which have no header.
//   - Prepare streams input files through a tokenizer (a Tokenizer) into
//     train and val shards and a manifest (Manifest, manifest.json): it
//     reads and encodes a chunk at a time, cut where the tokenizer's
//     Boundary allows, so memory stays bounded whatever the corpus size.
//     OpenPrepared opens the result; TokenFiles opens token files that
//     no manifest describes.
//
// Windows:
//
//   - Tokens is a read-only token sequence: ids in memory (Int32s), a
//     memory-mapped shard (Uint16s or Uint32s), or several read as one (Concat).
//   - Sampler draws random block-size windows. Each window's position is a
//     pure function of the seed, a stream number, the optimizer step and
//     the window's index within the global batch, so a run sees the same
//     data however its batch is split across micro-batches and processes,
//     and a resumed run continues with exactly the windows it would have
//     drawn had it never stopped.
//   - Loader deals out a Sampler's windows to one process of a
//     data-parallel group, micro-batch by micro-batch: worker goroutines
//     fill a bounded ring of reusable buffers ahead of the trainer.
//
// NGram is the n-gram baseline: an interpolated Kneser-Ney model whose
// val perplexity a Transformer trained on the same tokens should beat.
package data
