package emu

import (
	"strings"
	"testing"
)

func TestParseKernels(t *testing.T) {
	src := `
// extern "C" __global__ void fleet_in_comment(int *x) {}
/* extern "C" __global__ void fleet_in_block_comment(int *x) {} */
extern "C" __global__ void fleet_a(float *__restrict__ dst, const float* __restrict__ src,
	float alpha, long long n) {}
extern "C" __global__ void __launch_bounds__(256, 2) fleet_b(const unsigned short *x, unsigned n, unsigned long long seed,
	const int k, volatile int *flag, unsigned char *mask, long long int m, double d, const void *any) {}
extern "C"  __global__  void  fleet_c ( void ) {}
#ifdef FLEET_NVRTC
extern "C" __global__ void fleet_d(int *x) {}
#else
extern "C" __global__ void fleet_d(int *x) {}
#endif
`
	sigs, err := parseKernels(src)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range sigs {
		got = append(got, s.Name+"("+paramList(s.Params)+")")
	}
	want := []string{
		"fleet_a(float* dst, float* src, float alpha, long long n)",
		"fleet_b(unsigned short* x, unsigned int n, unsigned long long seed, int k, int* flag, unsigned char* mask, long long m, double d, void* any)",
		"fleet_c()",
		"fleet_d(int* x)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseKernelsRejects(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`extern "C" __global__ void fleet_x(float **p) {}`, "pointers to pointers"},
		{`extern "C" __global__ void fleet_x(float &p) {}`, "references and arrays"},
		{`extern "C" __global__ void fleet_x(long n) {}`, `unsupported type "long"`},
		{`extern "C" __global__ void fleet_x(short n) {}`, `unsupported scalar type "short"`},
		{`extern "C" __global__ void fleet_x(double *p) {}`, `unsupported pointer type "double*"`},
		{`extern "C" __global__ void fleet_x(MyType p) {}`, `unsupported type "MyType"`},
		{`extern "C" __global__ void fleet_x(int) {}`, "need a type and a name"},
		{`extern "C" __global__ void fleet_x(int *p`, "no closing parenthesis"},
		{"extern \"C\" __global__ void fleet_x(int *p) {}\nextern \"C\" __global__ void fleet_x(float *p) {}", "declared twice with different parameters"},
	} {
		_, err := parseKernels(c.src)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.src, err, c.want)
		}
	}
}

func TestWrappers(t *testing.T) {
	w := wrappers([]kernelSig{{Name: "fleet_a", Params: []Param{{Name: "dst", Type: "float*", Elem: "float"}, {Name: "n", Type: "long long"}}}})
	for _, want := range []string{
		"fleet_a(*(float* *)a[0], *(long long *)a[1]);",
		"static_assert(std::is_same_v<fleet_emu::params_t<decltype(fleet_a)>, void(float*, long long)>",
		`extern "C" int fleet_emu_launch_fleet_a(const fleet_emu::Launch *l, void **a)`,
	} {
		if !strings.Contains(w, want) {
			t.Errorf("wrappers lack %q:\n%s", want, w)
		}
	}
}
