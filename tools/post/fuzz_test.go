package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"perfinsp/analysis/a2n"
	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
)

// corpusDir is the nrm2 reader's seed corpus: a real trace and its damaged
// shapes (truncations, a corrupted record, bad chunk headers, odd kallsyms).
const corpusDir = "../../format/nrm2/testdata/fuzz/FuzzParse"

// FuzzReport reads arbitrary bytes the way post does: the salvaging reader,
// the kernel symbols of the kallsyms chunk, every record formatted as in
// post.show and every tick's kernel address named. Nothing may panic or
// stop, and every kernel address gets a [module] name. (MTE records that
// would make post open module files on this machine are not applied.)
func FuzzReport(f *testing.F) {
	seeds, err := filepath.Glob(filepath.Join(corpusDir, "*"))
	if err != nil || len(seeds) == 0 {
		f.Fatalf("no seeds in %s (%v)", corpusDir, err)
	}
	for _, p := range seeds {
		text, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		lit, ok := bytes.CutPrefix(text, []byte("go test fuzz v1\n[]byte("))
		if !ok {
			f.Fatalf("%s: not a fuzz corpus file", p)
		}
		s, err := strconv.Unquote(string(bytes.TrimSuffix(bytes.TrimSpace(lit), []byte(")"))))
		if err != nil {
			f.Fatalf("%s: %v", p, err)
		}
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := nrm2.ParseWith(b, nrm2.Options{Salvage: true})
		if err != nil {
			return
		}
		r := a2n.New(file.Kallsyms)
		err = file.Records(func(rec *trace.Record) error {
			if line := trace.Format(rec); strings.Contains(line, "\n") {
				t.Fatalf("a record formats on more than one line: %q", line)
			}
			switch {
			case rec.Major == trace.MajorMTE && (rec.Minor == trace.MTEProcess || rec.Minor == trace.MTEThreadName):
				r.Apply(rec)
			case rec.Major == trace.MajorTprof:
				res := r.Resolve(uint32(rec.Field(0)), rec.Field(2), true)
				if !strings.HasPrefix(res.Module, "[") {
					t.Fatalf("kernel address %#x in module %q", rec.Field(2), res.Module)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("the salvaging reader stopped: %v", err)
		}
		_ = file.Warnings()
	})
}
