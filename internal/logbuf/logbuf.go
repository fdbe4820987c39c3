// Package logbuf holds log lines in memory for a short while and writes
// them out together: one write system call for many access log lines
// instead of one each.
package logbuf

import (
	"io"
	"sync"
	"time"
)

// Defaults of New.
const (
	// DefaultInterval is how long a buffered line waits at most.
	DefaultInterval = 100 * time.Millisecond
	// DefaultSize is how many bytes are held before they are written at
	// once.
	DefaultSize = 32 << 10
)

// Writer writes to an underlying writer in two ways: its own Write goes
// through at once (after what is buffered, so lines keep their order),
// and the writer Buffered returns holds lines until Size bytes are held,
// Interval has passed since the first of them, or Flush. Writes to the
// underlying writer are serialised. Its zero value is not usable: create
// it with New.
type Writer struct {
	out      io.Writer
	interval time.Duration
	size     int

	mu    sync.Mutex
	buf   []byte
	timer *time.Timer // armed while buf holds lines
}

// New returns a Writer over out that holds buffered lines at most
// interval (0: DefaultInterval) and size bytes (0: DefaultSize).
func New(out io.Writer, interval time.Duration, size int) *Writer {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if size <= 0 {
		size = DefaultSize
	}
	return &Writer{out: out, interval: interval, size: size}
}

// Write writes p at once, after the lines held.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		if len(w.buf)+len(p) <= w.size {
			// One write for both.
			w.buf = append(w.buf, p...)
			return len(p), w.flushLocked()
		}
		_ = w.flushLocked()
	}
	return w.out.Write(p)
}

// Buffered returns the writer whose lines are held (see Writer).
func (w *Writer) Buffered() io.Writer { return buffered{w} }

type buffered struct{ w *Writer }

func (b buffered) Write(p []byte) (int, error) {
	w := b.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf)+len(p) > w.size {
		if err := w.flushLocked(); err != nil {
			return 0, err
		}
		if len(p) >= w.size {
			return w.out.Write(p)
		}
	}
	if len(w.buf) == 0 {
		if w.timer == nil {
			w.timer = time.AfterFunc(w.interval, w.flushTimer)
		} else {
			w.timer.Reset(w.interval)
		}
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *Writer) flushTimer() {
	w.mu.Lock()
	defer w.mu.Unlock()
	_ = w.flushLocked()
}

// Flush writes the lines held.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if len(w.buf) == 0 {
		return nil
	}
	if w.timer != nil {
		w.timer.Stop()
	}
	_, err := w.out.Write(w.buf)
	w.buf = w.buf[:0] // never more than size
	return err
}
