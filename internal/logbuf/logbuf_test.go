package logbuf

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer records each write apart.
type lockedBuffer struct {
	mu     sync.Mutex
	writes []string
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.writes = append(b.writes, string(p))
	return len(p), nil
}

func (b *lockedBuffer) get() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.writes...)
}

func TestBufferedLinesWaitAndKeepOrder(t *testing.T) {
	out := &lockedBuffer{}
	w := New(out, time.Hour, 1024)
	bw := w.Buffered()
	bw.Write([]byte("a\n"))
	bw.Write([]byte("b\n"))
	if got := out.get(); len(got) != 0 {
		t.Fatalf("buffered lines written at once: %q", got)
	}
	w.Write([]byte("now\n"))
	if got := out.get(); len(got) != 1 || got[0] != "a\nb\nnow\n" {
		t.Fatalf("a direct line after buffered ones: writes %q, want one write a, b, now", got)
	}
	bw.Write([]byte("c\n"))
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := out.get(); len(got) != 2 || got[1] != "c\n" {
		t.Fatalf("Flush: writes %q", got)
	}
	if err := w.Flush(); err != nil || len(out.get()) != 2 {
		t.Fatalf("Flush of nothing wrote: %q", out.get())
	}
}

func TestBufferedLinesGoOutAfterInterval(t *testing.T) {
	out := &lockedBuffer{}
	w := New(out, 20*time.Millisecond, 1024)
	for round := range 2 { // the timer arms again after a flush
		w.Buffered().Write([]byte("line\n"))
		deadline := time.Now().Add(5 * time.Second)
		for len(out.get()) != round+1 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: buffered line not written after the interval", round)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestBufferedLinesGoOutWhenFull(t *testing.T) {
	out := &lockedBuffer{}
	w := New(out, time.Hour, 10)
	bw := w.Buffered()
	bw.Write([]byte("12345\n")) // 6
	bw.Write([]byte("1234\n"))  // 11 > 10: the first goes out
	if got := out.get(); len(got) != 1 || got[0] != "12345\n" {
		t.Fatalf("writes %q, want the first line once the second did not fit", got)
	}
	long := strings.Repeat("x", 20) + "\n"
	bw.Write([]byte(long)) // larger than the buffer: held lines, then it
	if got := out.get(); len(got) != 3 || got[1] != "1234\n" || got[2] != long {
		t.Fatalf("writes %q", got)
	}
	w.Write([]byte(long)) // direct and large, nothing held
	if got := out.get(); len(got) != 4 || got[3] != long {
		t.Fatalf("writes %q", got)
	}
}

func TestConcurrentWritesLoseNothing(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	w := New(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) }), time.Millisecond, 64)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 200 {
				if i%2 == 0 {
					w.Buffered().Write([]byte("b\n"))
				} else {
					w.Write([]byte("d\n"))
				}
			}
		})
	}
	wg.Wait()
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(out.String(), "\n"); n != 1600 {
		t.Fatalf("%d lines written, want 1600", n)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
