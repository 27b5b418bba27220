package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"perfinsp/analysis/tprof"
)

// writeAnnotate writes annotate.out at path for the function fn: its
// instructions with tprof's ticks where the trace has ticks in it, and
// with ITrace's exact counts where the trace has ITrace records of it
// (it: the run's ITrace pass). Only a trace with neither is an error:
// the one that says what the trace holds.
func writeAnnotate(path, fn string, rep *tprof.Report, it *itracePass, stdout io.Writer) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tErr := rep.WriteAnnotate(f, fn)
	iErr := errors.New("no ITrace pass")
	if it != nil {
		_, iErr = it.writeAnnotate(f, fn)
	}
	if cerr := f.Close(); cerr != nil {
		return fmt.Errorf("write %s: %w", path, cerr)
	}
	switch {
	case tErr == nil && iErr == nil:
		fmt.Fprintf(stdout, "post: wrote %s (tprof's ticks and ITrace's instructions)\n", path)
	case tErr == nil:
		fmt.Fprintf(stdout, "post: wrote %s (tprof's ticks)\n", path)
	case iErr == nil:
		fmt.Fprintf(stdout, "post: wrote %s (ITrace's instructions)\n", path)
	case it != nil && it.rep.Instructions > 0:
		os.Remove(path)
		return iErr
	default:
		os.Remove(path)
		return tErr
	}
	return nil
}
