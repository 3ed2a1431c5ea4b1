package launch

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds how many names ExpandHostList produces, so a typo such as
// "n[0-999999999]" is an error rather than an exhausted memory.
const MaxHosts = 1 << 20

// A hostPattern is one comma-separated entry of a host list: literal text
// and bracketed number sets, expanded as their cartesian product
// ("r[1-2]n[01-02]" is r1n01, r1n02, r2n01, r2n02).
type hostPattern []hostPart

// A hostPart is literal text (ranges nil) or a bracketed set of numbers.
type hostPart struct {
	lit    string
	ranges []numRange
}

// numRange is lo..hi inclusive, printed zero-padded to width digits.
type numRange struct{ lo, hi, width int }

func (r numRange) count() int { return r.hi - r.lo + 1 }

func (r numRange) format(n int) string {
	s := strconv.Itoa(n)
	if len(s) < r.width {
		s = strings.Repeat("0", r.width-len(s)) + s
	}
	return s
}

func (p hostPart) count() int {
	if p.ranges == nil {
		return 1
	}
	n := 0
	for _, r := range p.ranges {
		n += r.count()
	}
	return n
}

// at returns the i-th value of a bracketed set, in written order.
func (p hostPart) at(i int) string {
	for _, r := range p.ranges {
		if i < r.count() {
			return r.format(r.lo + i)
		}
		i -= r.count()
	}
	panic("launch: host range index out of bounds")
}

// parseHostList parses Slurm's compressed host list syntax: entries
// separated by commas outside brackets; inside brackets, numbers and
// ranges lo-hi separated by commas, zero-padded to the width of lo as
// written ("[08-10]" is 08, 09, 10; "[8-10]" is 8, 9, 10).
func parseHostList(s string) ([]hostPattern, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty host list")
	}
	var out []hostPattern
	var cur hostPattern
	var lit strings.Builder
	entryStart := 0
	flushLit := func() {
		if lit.Len() > 0 {
			cur = append(cur, hostPart{lit: lit.String()})
			lit.Reset()
		}
	}
	endEntry := func(end int) error {
		flushLit()
		if len(cur) == 0 {
			return fmt.Errorf("host list %q: empty host name at offset %d", s, entryStart)
		}
		out = append(out, cur)
		cur = nil
		entryStart = end + 1
		return nil
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case ',':
			if err := endEntry(i); err != nil {
				return nil, err
			}
		case '[':
			j := strings.IndexByte(s[i+1:], ']')
			if j < 0 {
				return nil, fmt.Errorf("host list %q: '[' at offset %d is never closed", s, i)
			}
			body := s[i+1 : i+1+j]
			if k := strings.IndexByte(body, '['); k >= 0 {
				return nil, fmt.Errorf("host list %q: nested '[' at offset %d", s, i+1+k)
			}
			ranges, err := parseRanges(body)
			if err != nil {
				return nil, fmt.Errorf("host list %q: in [%s]: %v", s, body, err)
			}
			flushLit()
			cur = append(cur, hostPart{ranges: ranges})
			i += j + 1
		case ']':
			return nil, fmt.Errorf("host list %q: ']' at offset %d without '['", s, i)
		case ' ', '\t', '\n':
			return nil, fmt.Errorf("host list %q: white space at offset %d", s, i)
		default:
			lit.WriteByte(c)
		}
	}
	if err := endEntry(len(s)); err != nil {
		return nil, err
	}
	return out, nil
}

// parseRanges parses the inside of one pair of brackets.
func parseRanges(body string) ([]numRange, error) {
	if body == "" {
		return nil, fmt.Errorf("empty brackets")
	}
	var out []numRange
	for _, item := range strings.Split(body, ",") {
		loS, hiS, isRange := strings.Cut(item, "-")
		lo, err := parseHostNum(loS)
		if err != nil {
			return nil, err
		}
		hi := lo
		if isRange {
			if hi, err = parseHostNum(hiS); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, fmt.Errorf("range %s runs backwards", item)
			}
		}
		if hi-lo >= MaxHosts {
			return nil, fmt.Errorf("range %s holds more than %d hosts", item, MaxHosts)
		}
		out = append(out, numRange{lo: lo, hi: hi, width: len(loS)})
	}
	return out, nil
}

func parseHostNum(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("missing number")
	}
	if len(s) > 9 {
		return 0, fmt.Errorf("number %q is too long", s)
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	n, _ := strconv.Atoi(s)
	return n, nil
}

// ExpandHostList expands a Slurm host list such as
// "node[01-04,07],gpu5" into its names in order (node01, node02, node03,
// node04, node07, gpu5). Several bracket sets in one name expand as their
// product, the leftmost varying slowest. Errors name the list and the
// offending part: unbalanced or nested brackets, empty names or brackets,
// non-numeric or backwards ranges, and lists of more than MaxHosts names.
func ExpandHostList(s string) ([]string, error) {
	pats, err := parseHostList(s)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, p := range pats {
		n := 1
		for _, part := range p {
			n *= part.count()
			if n > MaxHosts {
				break
			}
		}
		total += n
		if total > MaxHosts {
			return nil, fmt.Errorf("host list %q names more than %d hosts", s, MaxHosts)
		}
	}
	out := make([]string, 0, total)
	for _, p := range pats {
		out = expandPattern(out, p, "")
	}
	return out, nil
}

func expandPattern(out []string, p hostPattern, prefix string) []string {
	if len(p) == 0 {
		return append(out, prefix)
	}
	part := p[0]
	if part.ranges == nil {
		return expandPattern(out, p[1:], prefix+part.lit)
	}
	for i := 0; i < part.count(); i++ {
		out = expandPattern(out, p[1:], prefix+part.at(i))
	}
	return out
}

// FirstHost returns the first name of a Slurm host list without expanding
// the rest (the whole list is still checked). It is where rank 0 of a step
// runs, so it is the job's master address under srun.
func FirstHost(s string) (string, error) {
	pats, err := parseHostList(s)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, part := range pats[0] {
		if part.ranges == nil {
			b.WriteString(part.lit)
		} else {
			b.WriteString(part.at(0))
		}
	}
	return b.String(), nil
}

// ParseTasksPerNode reads Slurm's tasks-per-node lists
// (SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE, SLURM_NTASKS_PER_NODE):
// comma-separated counts, each optionally followed by "(xR)" for R nodes
// in a row, in node order: "4(x2),1" is 4, 4, 1.
func ParseTasksPerNode(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty tasks-per-node list")
	}
	var out []int
	for _, item := range strings.Split(s, ",") {
		countS, rep := item, 1
		if i := strings.IndexByte(item, '('); i >= 0 {
			if !strings.HasSuffix(item, ")") || !strings.HasPrefix(item[i:], "(x") {
				return nil, fmt.Errorf("tasks per node %q: %q is not N or N(xR)", s, item)
			}
			r, err := strconv.Atoi(item[i+2 : len(item)-1])
			if err != nil || r < 1 {
				return nil, fmt.Errorf("tasks per node %q: bad repeat count in %q", s, item)
			}
			countS, rep = item[:i], r
		}
		n, err := strconv.Atoi(countS)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("tasks per node %q: %q is not a positive count", s, countS)
		}
		if len(out)+rep > MaxHosts {
			return nil, fmt.Errorf("tasks per node %q: more than %d nodes", s, MaxHosts)
		}
		for range rep {
			out = append(out, n)
		}
	}
	return out, nil
}
