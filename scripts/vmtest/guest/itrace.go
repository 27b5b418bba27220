package main

import (
	"fmt"
	"os"
	"strings"

	pitrace "perfinsp/libperfutil/itrace"
)

// The bundled example's own functions (examples/itrace.c): the ones whose
// counts do not depend on the C library's CPU-dependent variants.
var itraceOwnFuncs = []string{"main", "fib", "leaf", "leaf_loop", "apply", "op_add", "op_mul", "copy_rep", "on_signal", "worker", "use_libm"}

func parseCG(path string) (map[string]*pitrace.CGFunc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cg, err := pitrace.ParseCallgrind(f)
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
