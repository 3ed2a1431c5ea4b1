package main

import (
	"strings"
	"unicode"

	"github.com/fleetml/fleet/train/config"
)

// flagName is the flag that sets a settings field the libraries name in
// their errors (see package setting): the flag the field's table declares
// (train's config.Flags, run's launchFlags), else, for a command's own
// few flags, the field's name in kebab case (SimWorld is --sim-world).
func flagName(field string) string {
	if f, ok := config.Flags.FlagOf(field); ok {
		return "--" + f
	}
	if f, ok := launchFlags.FlagOf(field); ok {
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
