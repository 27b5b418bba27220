package main

import (
	"errors"
	"fmt"

	"perfinsp/analysis/tprof"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// openTrace opens the trace file post reads. Only a regular file whose
// header is good is read (nrm2.OpenWith). A damaged file is salvaged: every
// intact chunk and segment is read and the reports say what was lost;
// strict refuses it instead, records included.
func openTrace(path string, strict bool) (*nrm2.File, error) {
	f, err := nrm2.OpenWith(path, nrm2.Options{Salvage: !strict})
	if err == nil && strict {
		if err = f.Validate(); err != nil {
			f.Close()
			err = fmt.Errorf("%s: %w", path, err)
		}
	}
	var fe *nrm2.FormatError
	var de *trace.DecodeError
	if strict && (errors.As(err, &fe) && fe.Offset > 0 || errors.As(err, &de)) {
		err = fmt.Errorf("%w (without -strict, post reads what is intact and reports what was lost)", err)
	}
	return f, err
}

// warnings returns the lines every report starts with: the report's own,
// then the file's (damage salvaged, missing statistics) that it does not
// already hold.
func warnings(rep *tprof.Report) []string {
	out := rep.Warnings()
	have := map[string]bool{}
	for _, w := range out {
		have[w] = true
	}
	for _, w := range rep.File.Warnings() {
		if !have[w] {
			out = append(out, w)
		}
	}
	return out
}
