package perfetto

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"perfinsp/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// packets splits a Trace into its packets' bytes (field 1).
func packets(t *testing.T, b []byte) [][]byte {
	t.Helper()
	var ps [][]byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			t.Fatalf("not a Trace packet: field %d type %d", num, typ)
		}
		p, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			t.Fatal("truncated packet")
		}
		ps, b = append(ps, p), b[n+m:]
	}
	return ps
}

// hasField tells whether the message b has field num at its top level.
func hasField(t *testing.T, b []byte, num protowire.Number) bool {
	t.Helper()
	for len(b) > 0 {
		n, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			t.Fatal("bad tag")
		}
		l := protowire.ConsumeFieldValue(n, typ, b[k:])
		if l < 0 {
			t.Fatal("bad field")
		}
		if n == num {
			return true
		}
		b = b[k+l:]
	}
	return false
}

// A name, category, argument or call stack is interned once: an event
// that repeats another's carries no InternedData, and is the size of
// the other's without it; only the sequence's first packet clears its
// state. An empty trace is an empty file.
func TestInternedOnce(t *testing.T) {
	var empty bytes.Buffer
	if err := New(&empty).Close(); err != nil || empty.Len() != 0 {
		t.Fatalf("an empty trace: %d bytes, %v", empty.Len(), err)
	}
	var buf bytes.Buffer
	w := New(&buf)
	track := w.Thread(10, 11, "worker")
	root := w.FrameOf(0, w.Name("main"), w.Name("prog"))
	leaf := w.FrameOf(root, w.Name("work"), w.Name("prog"))
	for i := range 3 {
		w.Instant(track, uint64(100+i), "sample", "work", leaf, Str("module", "prog"), Num("cpu", 1))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ps := packets(t, buf.Bytes())
	if len(ps) != 4 {
		t.Fatalf("%d packets, want a descriptor and 3 events", len(ps))
	}
	if !hasField(t, ps[1], fPktInternedData) || hasField(t, ps[2], fPktInternedData) || hasField(t, ps[3], fPktInternedData) {
		t.Fatal("interned data not in the first event only")
	}
	if len(ps[2]) != len(ps[3]) || len(ps[2]) >= len(ps[1]) {
		t.Fatalf("events of %d, %d and %d bytes", len(ps[1]), len(ps[2]), len(ps[3]))
	}
	for i, p := range ps {
		var flags uint64
		for b := p; len(b) > 0; {
			n, typ, k := protowire.ConsumeTag(b)
			l := protowire.ConsumeFieldValue(n, typ, b[k:])
			if n == fPktSequenceFlags {
				flags, _ = protowire.ConsumeVarint(b[k:])
			}
			b = b[k+l:]
		}
		if cleared := flags&seqIncrementalClear != 0; cleared != (i == 0) {
			t.Fatalf("packet %d: sequence flags %d", i, flags)
		}
	}
}
