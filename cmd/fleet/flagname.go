package main

import (
	"strings"
	"unicode"
)

// flagNames are the flags whose names are not their field's in kebab case.
var flagNames = map[string]string{
	"TensorBoard":  "tensorboard",
	"NProcPerNode": "nproc-per-node",
	"NNodes":       "nnodes",
	"MinNProc":     "min-nproc",
	"CPUBF16":      "cpu-bf16",
}

// flagName is the flag that sets a settings field the libraries name in
// their errors (see package setting): a field's flag is its name in kebab
// case (BatchSize is --batch-size, LRDecayIters --lr-decay-iters) unless
// flagNames says otherwise.
func flagName(field string) string {
	if f, ok := flagNames[field]; ok {
		return "--" + f
	}
	return "--" + kebab(field)
}

// kebab writes a Go field name in lower case with a dash before each word:
// a capital after a lower-case letter or a digit starts one, and so does
// the last capital of an acronym followed by lower case (LRDecay: lr-decay).
func kebab(field string) string {
	r := []rune(field)
	var b strings.Builder
	for i, c := range r {
		if i > 0 && unicode.IsUpper(c) {
			prev := r[i-1]
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower) {
				b.WriteByte('-')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// orAuto is s, or "auto" where s is empty: a default that says what it
// does.
func orAuto(s string) string {
	if s == "" {
		return "auto"
	}
	return s
}
