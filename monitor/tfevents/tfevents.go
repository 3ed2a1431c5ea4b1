// Package tfevents writes TensorBoard event files: scalars and text
// summaries that TensorBoard (and anything built on its event reader) can
// load, without a protobuf library.
//
// An event file is a sequence of records. Each record is framed as
//
//	uint64 length (little-endian)
//	uint32 masked CRC32C of the 8 length bytes
//	length bytes of data: one serialized tensorboard.Event message
//	uint32 masked CRC32C of the data
//
// where the mask is ((crc >> 15) | (crc << 17)) + 0xa282ead8 and CRC32C is
// CRC-32 with the Castagnoli polynomial. The first record of every file is an
// Event whose file_version is "brain.Event:2".
//
// The messages are encoded by hand. The subset used here is
//
//	Event           { double wall_time = 1; int64 step = 2;
//	                  string file_version = 3; Summary summary = 5; }
//	Summary         { repeated Value value = 1; }
//	Value           { string tag = 1; float simple_value = 2;
//	                  TensorProto tensor = 8; SummaryMetadata metadata = 9; }
//	SummaryMetadata { PluginData plugin_data = 1; DataClass data_class = 4; }
//	PluginData      { string plugin_name = 1; bytes content = 2; }
//	TensorProto     { DataType dtype = 1; TensorShapeProto tensor_shape = 2;
//	                  repeated bytes string_val = 8; }
//	TensorShapeProto{ repeated Dim dim = 2; }   Dim { int64 size = 1; }
//
// A scalar is a Value with simple_value (a float32, as TensorBoard stores
// it). A text summary is a Value whose metadata names the "text" plugin
// (data class DATA_CLASS_TENSOR) and whose tensor is a rank-0 DT_STRING
// tensor holding the text as its one string_val; TensorBoard's text plugin
// renders a rank-0 string as Markdown (a rank-1 one would be drawn as a table).
//
// A Writer is buffered: records reach the file when the buffer fills, when
// FlushInterval has passed since the last flush (checked on each write), on
// Flush and on Close. Steady-state writes of scalars do not allocate.
package tfevents

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// FileVersion is the file_version of the first event of every file.
const FileVersion = "brain.Event:2"

// FlushInterval is how long records may wait in the buffer: a write that
// finds the last flush older than this flushes the buffer to the file.
const FlushInterval = 10 * time.Second

const bufferSize = 64 << 10

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskedCRC is the masked CRC32C that frames records.
func maskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + 0xa282ead8
}

// fileCounter tells apart files created by one process within one second.
var fileCounter atomic.Uint64

// Writer appends events to one event file.
//
// A Writer is meant for one goroutine: its methods must not be called
// concurrently (wrap it in a mutex to share it). After a write to the file
// fails, every later call returns that first error.
type Writer struct {
	f         *os.File
	bw        *bufio.Writer
	path      string
	rec       []byte // scratch: one framed record
	err       error
	lastFlush time.Time
	closed    bool
}

// NewWriter creates dir if needed and a new event file in it, named
// events.out.tfevents.<unix seconds>.<hostname>.<pid>.<counter>, and writes
// the file_version event. It never overwrites an existing file.
func NewWriter(dir string) (*Writer, error) {
	if dir == "" {
		return nil, errors.New("tfevents: empty directory name")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("tfevents: %w", err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == os.PathSeparator || r < ' ' {
			return '_'
		}
		return r
	}, host)
	now := time.Now()
	var f *os.File
	var path string
	for range 100 {
		name := "events.out.tfevents." + strconv.FormatInt(now.Unix(), 10) + "." + host + "." +
			strconv.Itoa(os.Getpid()) + "." + strconv.FormatUint(fileCounter.Add(1)-1, 10)
		path = filepath.Join(dir, name)
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil || !errors.Is(err, os.ErrExist) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("tfevents: %w", err)
	}
	w := &Writer{
		f:         f,
		bw:        bufio.NewWriterSize(f, bufferSize),
		path:      path,
		rec:       make([]byte, 0, 512),
		lastFlush: now,
	}
	w.writeVersion(now)
	if err := w.Flush(); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return w, nil
}

// Path is the event file's path.
func (w *Writer) Path() string { return w.path }

// Scalar appends a scalar summary: tag's value v at step, recorded at wall
// (time.Now() when wall is the zero Time). TensorBoard stores scalars as
// float32, so v is rounded to float32. tag must be valid UTF-8.
func (w *Writer) Scalar(tag string, step int64, v float64, wall time.Time) error {
	if err := w.check(tag); err != nil {
		return err
	}
	// Value: tag (1), simple_value (2, fixed32).
	valueLen := sizeBytesField(1, len(tag)) + 1 + 4
	summaryLen := sizeBytesField(1, valueLen)
	b := w.beginEvent(wall, step, summaryLen)
	b = appendTag(b, 1, wireBytes) // Summary.value
	b = appendVarint(b, uint64(valueLen))
	b = appendString(b, 1, tag)      // Value.tag
	b = appendTag(b, 2, wireFixed32) // Value.simple_value
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
	return w.endEvent(b)
}

// Text appends a text summary that TensorBoard's text plugin shows (as
// Markdown) under tag at step, recorded at wall (time.Now() when wall is
// the zero Time). tag must be valid UTF-8; text should be.
func (w *Writer) Text(tag string, step int64, text string, wall time.Time) error {
	if err := w.check(tag); err != nil {
		return err
	}
	// PluginData: plugin_name (1) = "text"; content left empty.
	pluginLen := sizeBytesField(1, len(textPlugin))
	// SummaryMetadata: plugin_data (1), data_class (4) = DATA_CLASS_TENSOR.
	metaLen := sizeBytesField(1, pluginLen) + 1 + sizeVarint(dataClassTensor)
	// TensorProto: dtype (1) = DT_STRING, tensor_shape (2) = rank 0 (empty
	// message), string_val (8) = text.
	tensorLen := 1 + sizeVarint(dtString) + sizeBytesField(2, 0) + sizeBytesField(8, len(text))
	// Value: tag (1), tensor (8), metadata (9).
	valueLen := sizeBytesField(1, len(tag)) + sizeBytesField(8, tensorLen) + sizeBytesField(9, metaLen)
	summaryLen := sizeBytesField(1, valueLen)

	b := w.beginEvent(wall, step, summaryLen)
	b = appendTag(b, 1, wireBytes) // Summary.value
	b = appendVarint(b, uint64(valueLen))
	b = appendString(b, 1, tag) // Value.tag
	b = appendTag(b, 8, wireBytes)
	b = appendVarint(b, uint64(tensorLen))
	b = appendTag(b, 1, wireVarint) // TensorProto.dtype
	b = appendVarint(b, dtString)
	b = appendTag(b, 2, wireBytes) // TensorProto.tensor_shape: rank 0
	b = appendVarint(b, 0)
	b = appendString(b, 8, text) // TensorProto.string_val
	b = appendTag(b, 9, wireBytes)
	b = appendVarint(b, uint64(metaLen))
	b = appendTag(b, 1, wireBytes) // SummaryMetadata.plugin_data
	b = appendVarint(b, uint64(pluginLen))
	b = appendString(b, 1, textPlugin) // PluginData.plugin_name
	b = appendTag(b, 4, wireVarint)    // SummaryMetadata.data_class
	b = appendVarint(b, dataClassTensor)
	return w.endEvent(b)
}

// Flush writes buffered records to the file (not to stable storage).
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errClosed
	}
	if err := w.bw.Flush(); err != nil {
		w.err = fmt.Errorf("tfevents: %w", err)
		return w.err
	}
	w.lastFlush = time.Now()
	return nil
}

// Close flushes the buffer, syncs the file to stable storage and closes
// it. Calling Close again returns nil.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	err := w.Flush()
	w.closed = true
	if err == nil {
		if e := w.f.Sync(); e != nil {
			err = fmt.Errorf("tfevents: %w", e)
		}
	}
	if e := w.f.Close(); e != nil && err == nil {
		err = fmt.Errorf("tfevents: %w", e)
	}
	if err != nil && w.err == nil {
		w.err = err
	}
	return err
}

var errClosed = errors.New("tfevents: writer is closed")

const (
	textPlugin      = "text"
	dtString        = 7 // DataType DT_STRING
	dataClassTensor = 2 // DataClass DATA_CLASS_TENSOR

	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

func (w *Writer) check(tag string) error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errClosed
	}
	if !utf8.ValidString(tag) {
		return fmt.Errorf("tfevents: tag %q is not valid UTF-8", tag)
	}
	return nil
}

func (w *Writer) writeVersion(now time.Time) {
	b := w.rec[:12]
	b = appendTag(b, 1, wireFixed64) // Event.wall_time
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(wallSeconds(now)))
	b = appendString(b, 3, FileVersion) // Event.file_version
	w.endEvent(b)
}

// beginEvent starts a record in w.rec, leaving 12 bytes for the length and
// its CRC, and encodes the Event's wall_time, step and the summary field's
// tag and length.
func (w *Writer) beginEvent(wall time.Time, step int64, summaryLen int) []byte {
	if wall.IsZero() {
		wall = time.Now()
	}
	b := w.rec[:12]
	b = appendTag(b, 1, wireFixed64) // Event.wall_time
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(wallSeconds(wall)))
	if step != 0 {
		b = appendTag(b, 2, wireVarint) // Event.step
		b = appendVarint(b, uint64(step))
	}
	b = appendTag(b, 5, wireBytes) // Event.summary
	return appendVarint(b, uint64(summaryLen))
}

// endEvent frames the event in b[12:] and writes the record.
func (w *Writer) endEvent(b []byte) error {
	data := b[12:]
	binary.LittleEndian.PutUint64(b[0:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(b[8:12], maskedCRC(b[0:8]))
	b = binary.LittleEndian.AppendUint32(b, maskedCRC(data))
	w.rec = b[:0]
	if w.err != nil {
		return w.err
	}
	if _, err := w.bw.Write(b); err != nil {
		w.err = fmt.Errorf("tfevents: %w", err)
		return w.err
	}
	if time.Since(w.lastFlush) >= FlushInterval {
		return w.Flush()
	}
	return nil
}

func wallSeconds(t time.Time) float64 {
	return float64(t.UnixNano()) / 1e9
}

func appendTag(b []byte, field int, wire int) []byte {
	return appendVarint(b, uint64(field)<<3|uint64(wire))
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendString(b []byte, field int, s string) []byte {
	b = appendTag(b, field, wireBytes)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func sizeVarint(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// sizeBytesField is the encoded size of a length-delimited field of n bytes
// (field numbers below 16 take one tag byte).
func sizeBytesField(field int, n int) int {
	return sizeVarint(uint64(field)<<3) + sizeVarint(uint64(n)) + n
}
