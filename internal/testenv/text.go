package testenv

import "strings"

// Text is the tests' small training text: about 20 kB of two pangrams,
// enough for a tiny model to learn from in a few hundred steps.
func Text() string {
	var b strings.Builder
	for i := 0; b.Len() < 20000; i++ {
		b.WriteString("the quick brown fox jumps over the lazy dog. ")
		if i%3 == 0 {
			b.WriteString("pack my box with five dozen liquor jugs!\n")
		}
	}
	return b.String()
}
