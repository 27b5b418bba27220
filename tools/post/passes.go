package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// A recordPass is a report made from every record post reads, in time
// order, beside the tprof count: post.show, --script, the ITrace, merge
// and scheduling reports. The one reader gives each record to every pass
// in turn (res: a tprof tick's name as of its time, nil for any other
// record and for a tick the selection leaves out), with the resolver's
// process table as of the record; finish writes the pass's reports.
type recordPass interface {
	record(rec *trace.Record, res *a2n.Result)
	finish() error
}

// passes are the record passes of a run, in the order they take each
// record and finish.
type passes []recordPass

// onRecord is the one reader's hook that gives each record to every
// pass (nil with no pass: tprof may then read every CPU at once).
func (ps passes) onRecord() func(*trace.Record, *a2n.Result) {
	if len(ps) == 0 {
		return nil
	}
	return func(rec *trace.Record, res *a2n.Result) {
		for _, p := range ps {
			p.record(rec, res)
		}
	}
}

// unnamed tells whether no pass needs a tick's name (only whether the
// selection keeps it): the reader then names no tick.
func (ps passes) unnamed() bool {
	for _, p := range ps {
		switch p := p.(type) {
		case hookPass:
			if !p.unnamed {
				return false
			}
		case *itracePass: // (ITrace's records name their own addresses)
		default:
			return false
		}
	}
	return true
}

// itrace is the run's ITrace pass (nil: none).
func (ps passes) itrace() *itracePass {
	for _, p := range ps {
		if it, ok := p.(*itracePass); ok {
			return it
		}
	}
	return nil
}

// finish ends every pass, in order; the first error stops.
func (ps passes) finish() error {
	for _, p := range ps {
		if err := p.finish(); err != nil {
			return err
		}
	}
	return nil
}

// hookPass is a pass made of a record function and an end function;
// unnamed: its record function needs no tick's name.
type hookPass struct {
	rec     func(*trace.Record, *a2n.Result)
	end     func() error
	unnamed bool
}

func (h hookPass) record(rec *trace.Record, res *a2n.Result) { h.rec(rec, res) }
func (h hookPass) finish() error                             { return h.end() }

// showPass writes post.show: every record as text, a tick with its name.
// Its end (the report's warnings at the bottom) waits for the tprof
// report: finish does nothing, close writes them.
type showPass struct {
	path string
	f    *os.File
	w    *bufio.Writer
}

func newShowPass(outDir, in string, h nrm2.Header) (*showPass, error) {
	s := &showPass{path: filepath.Join(outDir, "post.show")}
	var err error
	if s.f, s.w, err = create(s.path); err != nil {
		return nil, err
	}
	fmt.Fprintf(s.w, "post.show of %s: %d CPUs, %s mode, kernel %s\n", in, h.NCPUs, nrm2.ModeName(h.Mode), h.KernelRelease)
	fmt.Fprintln(s.w, "CPU TIME(s)             RECORD        FIELDS")
	return s, nil
}

func (s *showPass) record(rec *trace.Record, res *a2n.Result) {
	if rec.Major == trace.MajorSys && rec.Minor == trace.SysTimeHigh {
		return
	}
	s.w.WriteString(trace.Format(rec))
	if res != nil {
		fmt.Fprintf(s.w, " -> %s %s+0x%x", res.Module, res.Symbol, res.Offset)
		if res.File != "" {
			fmt.Fprintf(s.w, " %s:%d", res.File, res.Line)
		}
	}
	if rec.MTE {
		s.w.WriteString(" [MTE]")
	}
	s.w.WriteByte('\n')
}

func (s *showPass) finish() error { return nil }

// close writes the report's warnings at the end of post.show and closes it.
func (s *showPass) close(warns []string, stdout io.Writer) error {
	defer s.f.Close()
	for _, l := range warns {
		fmt.Fprintln(s.w, l)
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("write post.show: %w", err)
	}
	fmt.Fprintf(stdout, "post: wrote %s\n", s.path)
	return nil
}

// scriptPass writes --script FILE (scriptWriter).
type scriptPass struct {
	*scriptWriter
	path   string
	stdout io.Writer
}

func (s scriptPass) finish() error {
	if err := s.close(); err != nil {
		return fmt.Errorf("write %s: %w", s.path, err)
	}
	fmt.Fprintf(s.stdout, "post: wrote %s (perf script form: stackcollapse-perf.pl %s | flamegraph.pl)\n", s.path, s.path)
	return nil
}
