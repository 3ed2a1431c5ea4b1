package launch

import (
	"bytes"
	"io"
	"sync"
)

// maxLine is the longest line a lineWriter holds back waiting for its end;
// longer ones are written in pieces of this size, each prefixed.
const maxLine = 64 << 10

// output is a destination shared by every process's lineWriters: one
// Write per batch of whole lines, under a lock, so lines never mix. Run's
// standard output and error share one lock, since both may be one pipe
// (2>&1), where a long write is not atomic.
type output struct {
	mu *sync.Mutex
	w  io.Writer
}

func (o *output) write(p []byte) {
	o.mu.Lock()
	o.w.Write(p) // a failing destination must not stall the child: ignore
	o.mu.Unlock()
}

// lineWriter prefixes each line written to it and passes whole lines on.
// exec's copying goroutine is its only writer.
type lineWriter struct {
	out     *output
	prefix  []byte
	partial []byte // the start of a line whose end has not come yet
	batch   []byte
}

func newLineWriter(out *output, prefix string) *lineWriter {
	return &lineWriter{out: out, prefix: []byte(prefix)}
}

func (l *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	l.batch = l.batch[:0]
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.partial = append(l.partial, p...)
			for len(l.partial) >= maxLine {
				l.add(l.partial[:maxLine])
				l.partial = append(l.partial[:0], l.partial[maxLine:]...)
			}
			break
		}
		if len(l.partial) > 0 {
			l.partial = append(l.partial, p[:i]...)
			l.add(l.partial)
			l.partial = l.partial[:0]
		} else {
			l.add(p[:i])
		}
		p = p[i+1:]
	}
	if len(l.batch) > 0 {
		l.out.write(l.batch)
	}
	return n, nil
}

// add appends one prefixed line to the batch.
func (l *lineWriter) add(line []byte) {
	l.batch = append(l.batch, l.prefix...)
	l.batch = append(l.batch, line...)
	l.batch = append(l.batch, '\n')
}

// flush writes a last line that had no newline.
func (l *lineWriter) flush() {
	if len(l.partial) == 0 {
		return
	}
	l.batch = l.batch[:0]
	l.add(l.partial)
	l.partial = l.partial[:0]
	l.out.write(l.batch)
}
