package libs

import "strconv"

// Codes is one library's table of status codes: the names its header gives
// them, by number. The bindings (the driver API, NVRTC, cuBLAS, NCCL, and
// OpenCL) each keep one, and Err turns a call's outcome into their error.
type Codes[C ~int32] struct {
	// Type is the C type's name, for a code the table does not name:
	// "CUresult" prints code 42 as CUresult(42).
	Type  string
	Names map[C]string
}

// Name is the header's name of code, or Type(code) where the table has
// none.
func (t Codes[C]) Name(code C) string {
	if n, ok := t.Names[code]; ok {
		return n
	}
	return t.Type + "(" + strconv.Itoa(int(code)) + ")"
}

// Code reads a call's integer result as a status code: the low 32 bits,
// as the C int they are.
func Code[C ~int32](r uintptr) C { return C(int32(uint32(r))) }

// Err turns a call's outcome into an error: err where the call could not
// be made (a missing symbol), nil where it returned 0 (success in every
// library fleet binds), and otherwise what fail makes of the code.
func (t Codes[C]) Err(r uintptr, err error, fail func(code C) error) error {
	if err != nil {
		return err
	}
	code := Code[C](r)
	if code == 0 {
		return nil
	}
	return fail(code)
}
