package main

import (
	"testing"

	"perfinsp/format/trace"
)

// jitFunc is a function of a fake process's code (fakeApp), 0x100 bytes.
type jitFunc struct {
	addr uint64
	name string
}

// fakeApp starts the records of a test trace of one process (pid and tid
// 600, named name) whose functions are named by JIT_LOAD records at time
// 1000: m holds the MTE buffer's records, tr the trace buffer's; must
// fails the test on an error.
func fakeApp(t *testing.T, name string, funcs ...jitFunc) (m, tr *trace.Writer, must func(error)) {
	t.Helper()
	m, tr = &trace.Writer{}, &trace.Writer{}
	must = func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(m.Write(trace.MajorMTE, trace.MTEProcess, trace.LayoutString, 100, []uint64{600, 1}, name))
	for _, f := range funcs {
		must(tr.Write(trace.MajorJITLoad, trace.JITLoad, trace.LayoutString, 1000, []uint64{600, 600, f.addr, 0x100}, f.name))
	}
	return m, tr, must
}
