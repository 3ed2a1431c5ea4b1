package kernels

import (
	"fmt"
	"regexp"
	"strings"
)

// Param is one parameter of a kernel, as declared in its source.
type Param struct {
	Name string
	// Type is the canonical C type without const, volatile or
	// __restrict__: "float*", "const" dropped; "int", "long long",
	// "unsigned int", "float", ...
	Type string
	// Elem is the pointee type for pointers ("float" for "float*"), and ""
	// for scalars.
	Elem string
}

// String is the parameter as declared: "float* dst".
func (p Param) String() string { return p.Type + " " + p.Name }

// Signature is a parsed `extern "C" __global__ void name(params)`: what
// the emulation harness builds a launcher from, and what the simulated
// GPU decodes a launch's parameters with.
type Signature struct {
	Name   string
	Params []Param
}

var kernelStartRE = regexp.MustCompile(`extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(`)

// scalarTypes are the parameter types a kernel may take by value, keyed by
// their canonical spelling.
var scalarTypes = map[string]bool{
	"int": true, "unsigned int": true, "long long": true, "unsigned long long": true,
	"float": true, "double": true,
}

// elemTypes are the types a kernel's pointer parameters may point to: those
// of the buffer types, and void.
var elemTypes = map[string]bool{
	"void": true, "float": true, "unsigned short": true, "int": true,
	"unsigned int": true, "long long": true, "unsigned char": true,
}

var typeWordsRE = regexp.MustCompile(`[A-Za-z_]\w*|\*|&|\[|\]|\S`)

// ParseSignatures finds every extern "C" __global__ kernel in src
// (comments removed) with its parameters.
func ParseSignatures(src string) ([]Signature, error) {
	src = stripComments(src)
	var sigs []Signature
	seen := map[string]int{}
	for _, m := range kernelStartRE.FindAllStringSubmatchIndex(src, -1) {
		name := src[m[2]:m[3]]
		open := m[1] - 1
		end := matchParen(src, open)
		if end < 0 {
			return nil, fmt.Errorf("kernel %s: no closing parenthesis for its parameter list", name)
		}
		params, err := parseParams(src[open+1 : end])
		if err != nil {
			return nil, fmt.Errorf("kernel %s: %v", name, err)
		}
		sig := Signature{Name: name, Params: params}
		if i, dup := seen[name]; dup {
			// The same kernel declared twice (say, in #if/#else
			// branches): fine while the parameters agree.
			if fmt.Sprint(sigs[i].Params) != fmt.Sprint(params) {
				return nil, fmt.Errorf("kernel %s is declared twice with different parameters", name)
			}
			continue
		}
		seen[name] = len(sigs)
		sigs = append(sigs, sig)
	}
	return sigs, nil
}

func matchParen(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// stripComments blanks // and /* */ comments (kernels hold no string or
// character literals that could contain them, beyond extern "C").
func stripComments(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "//"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return b.String()
			}
			i += j - 1
			b.WriteByte(' ')
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return b.String()
			}
			// Keep the newlines so that nothing else shifts lines.
			b.WriteString(strings.Repeat("\n", strings.Count(s[i:i+2+j+2], "\n")))
			b.WriteByte(' ')
			i += 2 + j + 1
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func parseParams(list string) ([]Param, error) {
	list = strings.TrimSpace(list)
	if list == "" || list == "void" {
		return nil, nil
	}
	var params []Param
	for i, decl := range strings.Split(list, ",") {
		p, err := parseParam(decl)
		if err != nil {
			return nil, fmt.Errorf("parameter %d (%q): %v", i+1, strings.TrimSpace(decl), err)
		}
		params = append(params, p)
	}
	return params, nil
}

func parseParam(decl string) (Param, error) {
	toks := typeWordsRE.FindAllString(decl, -1)
	var words []string
	stars := 0
	for _, t := range toks {
		switch t {
		case "const", "volatile", "__restrict__", "__restrict", "restrict":
		case "*":
			stars++
		case "&", "[", "]":
			return Param{}, fmt.Errorf("references and arrays are not kernel parameters; use a pointer")
		default:
			if t[0] != '_' && (t[0] < 'A' || t[0] > 'Z') && (t[0] < 'a' || t[0] > 'z') {
				return Param{}, fmt.Errorf("unexpected %q", t)
			}
			words = append(words, t)
		}
	}
	if len(words) < 2 {
		return Param{}, fmt.Errorf("need a type and a name")
	}
	name := words[len(words)-1]
	base, ok := canonicalType(words[:len(words)-1])
	if !ok {
		return Param{}, fmt.Errorf("unsupported type %q", strings.Join(words[:len(words)-1], " "))
	}
	switch stars {
	case 0:
		if !scalarTypes[base] {
			return Param{}, fmt.Errorf("unsupported scalar type %q (kernels take int, unsigned int, long long, unsigned long long, float or double by value)", base)
		}
		return Param{Name: name, Type: base}, nil
	case 1:
		if !elemTypes[base] {
			return Param{}, fmt.Errorf("unsupported pointer type %q", base+"*")
		}
		return Param{Name: name, Type: base + "*", Elem: base}, nil
	default:
		return Param{}, fmt.Errorf("pointers to pointers are not supported")
	}
}

// canonicalType spells a C base type one way: "unsigned" is "unsigned int",
// "long long int" is "long long", and so on.
func canonicalType(words []string) (string, bool) {
	var unsigned, signed bool
	var longs, shorts int
	var base string
	for _, w := range words {
		switch w {
		case "unsigned":
			unsigned = true
		case "signed":
			signed = true
		case "long":
			longs++
		case "short":
			shorts++
		case "int", "char", "float", "double", "void":
			if base != "" {
				return "", false
			}
			base = w
		default:
			return "", false
		}
	}
	if unsigned && signed {
		return "", false
	}
	switch {
	case base == "float" || base == "double" || base == "void":
		if unsigned || signed || longs > 0 || shorts > 0 {
			return "", false
		}
		return base, true
	case base == "char":
		if longs > 0 || shorts > 0 {
			return "", false
		}
		if unsigned {
			return "unsigned char", true
		}
		if signed {
			return "signed char", true
		}
		return "char", true
	}
	// An integer: base is "int" or empty.
	if shorts > 0 && longs > 0 || shorts > 1 {
		return "", false
	}
	var t string
	switch {
	case shorts == 1:
		t = "short"
	case longs == 2:
		t = "long long"
	case longs == 0:
		if base == "" && !unsigned && !signed {
			return "", false
		}
		t = "int"
	default:
		// long is 8 bytes on Linux and 4 on Windows: kernels use long long.
		return "", false
	}
	if unsigned {
		t = "unsigned " + t
	}
	return t, true
}
