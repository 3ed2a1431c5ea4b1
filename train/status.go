package train

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/fleetml/fleet/internal/term"
)

// statusLine keeps one live line at the bottom of a terminal: progress,
// loss, throughput and ETA, redrawn at most ten times a second. Other
// output clears it first, so log lines scroll above it. On anything but a
// terminal it is not used and the log has plain lines only.
type statusLine struct {
	mu    sync.Mutex // log lines may come from other goroutines (dist's)
	w     io.Writer
	shown bool
	last  time.Time
}

// newStatusLine returns a status line on w if w is a terminal, else nil.
func newStatusLine(w io.Writer) *statusLine {
	if !term.IsTerminal(w) {
		return nil
	}
	return &statusLine{w: w}
}

// Write clears the status line, then writes p.
func (s *statusLine) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shown {
		io.WriteString(s.w, "\r\033[K")
		s.shown = false
	}
	return s.w.Write(p)
}

// update redraws the line for a finished step.
func (s *statusLine) update(step, total int, loss string, tokPerSec, msPerStep float64) {
	if s == nil || time.Since(s.last) < 100*time.Millisecond && step < total {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = time.Now()
	const width = 24
	frac := float64(step) / float64(max(total, 1))
	bar := strings.Repeat("█", int(frac*width)) + strings.Repeat("·", width-int(frac*width))
	eta := time.Duration(float64(total-step) * msPerStep * float64(time.Millisecond)).Round(time.Second)
	line := fmt.Sprintf("\r\033[K%s %d/%d %3.0f%% | loss %s | %.0f tok/s | ETA %v", bar, step, total, 100*frac, loss, tokPerSec, eta)
	io.WriteString(s.w, line)
	s.shown = true
}

// done clears the line.
func (s *statusLine) done() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shown {
		io.WriteString(s.w, "\r\033[K")
		s.shown = false
	}
}
