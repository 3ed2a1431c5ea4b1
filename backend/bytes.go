package backend

import "unsafe"

// Element is a host element type that Upload and Download move.
type Element interface {
	~float32 | ~int32 | ~uint16 | ~int64 | ~uint8
}

// AsBytes views a host slice as its bytes, without copying, for Upload
// and Download. The bytes alias s.
func AsBytes[T Element](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}
