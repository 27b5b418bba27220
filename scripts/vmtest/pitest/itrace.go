package main

import (
	"fmt"
	"os"
	"strings"

	itracerep "perfinsp/analysis/itrace"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	itracectl "perfinsp/libperfutil/itrace"
)

// The bundled example's own functions (examples/itrace.c): the ones whose
// counts do not depend on the C library's CPU-dependent variants.
var itraceOwnFuncs = []string{"main", "fib", "leaf", "leaf_loop", "apply", "op_add", "op_mul", "copy_rep", "on_signal", "worker", "use_libm"}

func parseCG(path string) (map[string]*itracerep.CGFunc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cg, err := itracerep.ParseCallgrind(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cg, nil
}

// itraceCmp checks every function named (default: the example's own) for
// the same exclusive instructions and calls in got (post --callgrind of
// a module ITrace) as in want (valgrind --tool=callgrind on the host, the
// same static binary).
func itraceCmp(want, got string, funcs []string) error {
	w, err := parseCG(want)
	if err != nil {
		return err
	}
	g, err := parseCG(got)
	if err != nil {
		return err
	}
	if len(funcs) == 0 {
		funcs = itraceOwnFuncs
	}
	var bad []string
	for _, name := range funcs {
		a, b := w[name], g[name]
		switch {
		case a == nil || b == nil:
			bad = append(bad, fmt.Sprintf("%s: callgrind %v, itrace %v", name, a, b))
		case a.Self != b.Self || a.Calls != b.Calls:
			bad = append(bad, fmt.Sprintf("%s: itrace %d instructions %d calls, callgrind %d, %d", name, b.Self, b.Calls, a.Self, a.Calls))
		default:
			fmt.Printf("itrace: %-10s %9d instructions %7d calls (= callgrind)\n", name, b.Self, b.Calls)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("itrace differs from callgrind:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}

// itraceSink is written by every iteration (a load, add and store the
// instruction count below relies on); nothing reads it.
//
//lint:ignore U1000 written, never read, on purpose
var itraceSink uint64

//go:noinline
func itraceWork(n int) {
	for i := 0; i < n; i++ {
		itraceSink += uint64(i) * 3
	}
}

// itraceGo brackets one call with the Go library's ITraceOn/ITraceOff on
// the module (tracing must be on): the module must report exactly one
// thread stopped and at least the loop's instructions (5 per iteration:
// the loop body compiles to no fewer), and fewer than the loop plus the
// library's own on/off path could ever take.
func itraceGo() error {
	const n = 20000
	if b, err := itracectl.Backend(""); err != nil || b != "kmod" {
		return fmt.Errorf("itrace backend %q (%v), want kmod", b, err)
	}
	if err := itracectl.ITraceOn(); err != nil {
		return err
	}
	itraceWork(n)
	r, err := itracectl.ITraceOff()
	if err != nil {
		return err
	}
	fmt.Printf("itrace: Go ITraceOn/Off around one call: %d threads, %d instructions, %d records\n", r.Threads, r.Instructions, r.Records)
	if r.Threads != 1 {
		return fmt.Errorf("ITraceOff stopped %d threads, want 1 (the caller)", r.Threads)
	}
	if r.Instructions < 5*n || r.Instructions > 5*n+200000 {
		return fmt.Errorf("%d instructions traced for a %d-iteration loop", r.Instructions, n)
	}
	if _, err := itracectl.ITraceOff(); err == nil {
		return fmt.Errorf("a second ITraceOff succeeded")
	}
	return nil
}

// itraceCount prints the ITrace records of a trace file and the trace
// buffers' lost records: "itrace-count: records N lost M".
func itraceCount(path string) error {
	f, err := nrm2.Open(path)
	if err != nil {
		return err
	}
	n := 0
	if err := f.Records(func(r *trace.Record) error {
		if r.Major == trace.MajorITraceU || r.Major == trace.MajorITraceK {
			n++
		}
		return nil
	}); err != nil {
		return err
	}
	lost, _ := f.Lost()
	fmt.Printf("itrace-count: records %d lost %d\n", n, lost)
	return nil
}
