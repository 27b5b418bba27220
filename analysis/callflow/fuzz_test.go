package callflow

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A thread file is read from a directory a killed process left (its tail
// joined) or that someone else wrote: whatever its bytes, decoding ends
// with events or an error, never a panic, and the streamed decoder
// (Thread.Each, reads cut at any record) agrees with the one in memory.
func FuzzParseThread(f *testing.F) {
	evs := hookCalls(12)
	f.Add(encode(evs, 1, 2, -1))
	f.Add(encode(evs, 1, 2, 3))
	f.Add(encodeVersion(evs, 1, 2, -1, VersionLong))
	f.Add(encode(ab, 7, 8, -1))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		th, err := ParseThread(b)
		path := filepath.Join(dir, "hookit-1-2.bin")
		if werr := os.WriteFile(path, b, 0o600); werr != nil {
			t.Fatal(werr)
		}
		st, serr := ReadThread(path)
		if (err == nil) != (serr == nil) {
			t.Fatalf("in memory: %v; streamed: %v", err, serr)
		}
		if err != nil {
			return
		}
		if len(th.Events) != len(st.Events) || th.Partial != st.Partial {
			t.Fatalf("in memory %d events (partial %v), streamed %d (partial %v)", len(th.Events), th.Partial, len(st.Events), st.Partial)
		}
		for i := range th.Events {
			if th.Events[i] != st.Events[i] {
				t.Fatalf("event %d: %+v in memory, %+v streamed", i, th.Events[i], st.Events[i])
			}
		}
		// A tail of the same bytes joins without a panic too.
		_ = AppendTail(nil, bytes.Clone(b))
	})
}
