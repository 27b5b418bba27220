package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// progress prints on stderr how much of the trace post has read while it
// reads it: "post: read 1.2 GB of 3.4 GB (35 %)". On a terminal the first
// line comes after progressQuiet (a short read says nothing), then one
// every progressEvery; with --progress also one at each tenth of the trace
// and a last one when the reading ends. Never on stdout.
type progress struct {
	w      io.Writer
	total  int64
	read   func() int64 // the bytes read so far (another goroutine's)
	always bool         // --progress

	start, last time.Time
	tenth       int64 // the last tenth printed
	printed     bool
	stop, done  chan struct{}
}

// The pace of progress lines.
const (
	progressQuiet = 2 * time.Second
	progressEvery = 2 * time.Second
	progressPoll  = 100 * time.Millisecond
)

// newProgress makes the progress of a read of total bytes, read by read;
// nil when no line is to be printed (stderr not a terminal, no
// --progress).
func newProgress(stderr io.Writer, always bool, total int64, read func() int64) *progress {
	if !always && !isTerminal(stderr) {
		return nil
	}
	return &progress{w: stderr, total: total, read: read, always: always}
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// run prints the lines until end is called.
func (p *progress) run() {
	if p == nil {
		return
	}
	p.start = time.Now()
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(progressPoll)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case now := <-t.C:
				p.step(now, p.read())
			}
		}
	}()
}

// end stops the lines: the reading is over (a last line if one was
// printed before, or with --progress).
func (p *progress) end() {
	if p == nil {
		return
	}
	if p.stop != nil {
		close(p.stop)
		<-p.done
	}
	if p.printed || p.always {
		p.line(p.total)
	}
}

// step prints a line if one is due at now, with n bytes read.
func (p *progress) step(now time.Time, n int64) {
	if n >= p.total {
		return // read: the rest is the report's making (end says so)
	}
	due := now.Sub(p.start) >= progressQuiet && now.Sub(p.last) >= progressEvery
	tenth := n * 10 / p.total
	if p.always && tenth > p.tenth {
		due = true
	}
	if !due {
		return
	}
	p.last, p.tenth = now, tenth
	p.line(n)
}

func (p *progress) line(n int64) {
	n = min(n, p.total)
	pct := int64(100)
	if p.total > 0 {
		pct = n * 100 / p.total
	}
	fmt.Fprintf(p.w, "post: read %s of %s (%d %%)\n", humanBytes(n), humanBytes(p.total), pct)
	p.printed = true
}

// humanBytes is n in bytes, KB, MB or GB (powers of 1024), one decimal
// from KB on.
func humanBytes(n int64) string {
	const k = 1024
	switch {
	case n < k:
		return fmt.Sprintf("%d B", n)
	case n < k*k:
		return fmt.Sprintf("%.1f KB", float64(n)/k)
	case n < k*k*k:
		return fmt.Sprintf("%.1f MB", float64(n)/(k*k))
	}
	return fmt.Sprintf("%.1f GB", float64(n)/(k*k*k))
}
