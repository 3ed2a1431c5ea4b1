// Package data is fleet's data pipeline for the character-level GPT
// trainer. It turns raw text into the token windows that the model trains
// and is evaluated on, in the same way as nanoGPT's shakespeare_char
// recipe, but without a separate preparation step:
//
//   - LoadText reads the training text from a file or a folder of files;
//     DefaultCorpus builds a ready-made corpus from the Go standard
//     library source when the user names none.
//   - Char is the character tokenizer: its vocabulary is the sorted set of
//     distinct characters in the text. It is saved as JSON next to a
//     checkpoint so that sampling decodes exactly what training encoded.
//   - Split divides the token stream into a training part (the first 90%)
//     and a validation part (the rest).
//   - Sampler draws random block-size windows. Each window's position is a
//     pure function of the seed, a stream number, the optimizer step and
//     the window's index within the global batch, so a run sees the same
//     data however its batch is split across micro-batches and processes,
//     and a resumed run continues with exactly the windows it would have
//     drawn had it never stopped.
package data
