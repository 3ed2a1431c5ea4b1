package launch

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestExpandHostList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"node[01-04,07],gpu5", []string{"node01", "node02", "node03", "node04", "node07", "gpu5"}},
		{"gpu5", []string{"gpu5"}},
		{"n[8-10]", []string{"n8", "n9", "n10"}},
		{"n[08-10]", []string{"n08", "n09", "n10"}},
		{"n[098-101]", []string{"n098", "n099", "n100", "n101"}},
		{"a,b[1,3-4],c", []string{"a", "b1", "b3", "b4", "c"}},
		{"r[1-2]n[1-2]", []string{"r1n1", "r1n2", "r2n1", "r2n2"}},
		{"node-[1-2].cluster.local", []string{"node-1.cluster.local", "node-2.cluster.local"}},
		{"[7-8]", []string{"7", "8"}},
		{"x[3]", []string{"x3"}},
		{" n[1-2] ", []string{"n1", "n2"}},
		{"10.0.0.[1-2]", []string{"10.0.0.1", "10.0.0.2"}},
	} {
		got, err := ExpandHostList(c.in)
		if err != nil {
			t.Errorf("ExpandHostList(%q): %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ExpandHostList(%q) = %q, want %q", c.in, got, c.want)
		}
		first, err := FirstHost(c.in)
		if err != nil || first != c.want[0] {
			t.Errorf("FirstHost(%q) = %q, %v; want %q", c.in, first, err, c.want[0])
		}
	}
}

func TestHostListErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "empty host list"},
		{"a,,b", "empty host name"},
		{"a,", "empty host name"},
		{",a", "empty host name"},
		{"node[01-", "never closed"},
		{"node]", "without '['"},
		{"node[]", "empty brackets"},
		{"node[1,]", "missing number"},
		{"node[5-2]", "runs backwards"},
		{"node[1-x]", `"x" is not a number`},
		{"node[a]", `"a" is not a number`},
		{"node[[1]]", "nested"},
		{"node[0-99999999]", "more than"},
		{"n[1-1000]m[1-1000000]", "more than"},
		{"node[1-2] gpu1", "white space"},
		{"node[1234567890]", "too long"},
	} {
		_, err := ExpandHostList(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ExpandHostList(%q) = %v, want an error with %q", c.in, err, c.want)
		}
		if strings.Contains(c.want, "more than") {
			continue // FirstHost does not expand, so it does not count
		}
		if _, err := FirstHost(c.in); err == nil {
			t.Errorf("FirstHost(%q) accepted it", c.in)
		}
	}
}

// TestHostListRandom writes random host lists from known names and checks
// they expand back to them.
func TestHostListRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, uint64(len(t.Name()))))
	letters := "abcxyz-."
	word := func() string {
		b := []byte{letters[rng.IntN(3)]}
		for range rng.IntN(4) {
			b = append(b, letters[rng.IntN(len(letters))])
		}
		return string(b)
	}
	for iter := 0; iter < 300; iter++ {
		var list []string
		var want []string
		for range 1 + rng.IntN(4) {
			pre := word()
			entry := pre
			expansions := []string{pre}
			for range rng.IntN(3) {
				width := 1 + rng.IntN(3)
				var items, vals []string
				next := rng.IntN(20)
				for range 1 + rng.IntN(3) {
					lo := next
					hi := lo + rng.IntN(4)
					next = hi + 1 + rng.IntN(5)
					f := fmt.Sprintf("%%0%dd", width)
					if lo == hi && rng.IntN(2) == 0 {
						items = append(items, fmt.Sprintf(f, lo))
					} else {
						items = append(items, fmt.Sprintf(f, lo)+"-"+fmt.Sprintf(f, hi))
					}
					for n := lo; n <= hi; n++ {
						vals = append(vals, fmt.Sprintf(f, n))
					}
				}
				suf := ""
				if rng.IntN(2) == 0 {
					suf = word()
				}
				entry += "[" + strings.Join(items, ",") + "]" + suf
				var next2 []string
				for _, e := range expansions {
					for _, v := range vals {
						next2 = append(next2, e+v+suf)
					}
				}
				expansions = next2
			}
			list = append(list, entry)
			want = append(want, expansions...)
		}
		s := strings.Join(list, ",")
		got, err := ExpandHostList(s)
		if err != nil {
			t.Fatalf("ExpandHostList(%q): %v", s, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("ExpandHostList(%q) = %q, want %q", s, got, want)
		}
		if first, _ := FirstHost(s); first != want[0] {
			t.Fatalf("FirstHost(%q) = %q, want %q", s, first, want[0])
		}
	}
}

func TestParseTasksPerNode(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
	}{
		{"4", []int{4}},
		{"4(x2)", []int{4, 4}},
		{"2,1", []int{2, 1}},
		{"4(x2),1,3(x3)", []int{4, 4, 1, 3, 3, 3}},
	} {
		got, err := ParseTasksPerNode(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseTasksPerNode(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "0", "x", "4(x0)", "4(2)", "4(x2", "4(x2)x", "-1", "2,,1", "1(xx)"} {
		if got, err := ParseTasksPerNode(in); err == nil {
			t.Errorf("ParseTasksPerNode(%q) = %v, want an error", in, got)
		}
	}
}
