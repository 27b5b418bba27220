package itrace

import (
	"bytes"
	"encoding/binary"
	"testing"

	"perfinsp/format/trace"
)

// FuzzReplay replays arbitrary sequences of ITrace records (any minor,
// any field values, any CPU, threads switching between buffers) with
// stacks on, then writes the callgrind file: nothing may panic, and every
// instruction is either in a function or counted unattributed.
func FuzzReplay(f *testing.F) {
	f.Add([]byte{0, 3, 0, 0, 1, 0x10, 0, 0, 1, 0x20, 2, 5, 1, 0x10, 1, 9, 3, 0, 1, 2})
	f.Add(bytes.Repeat([]byte{1, 1, 0x20, 3, 2, 1, 0x10, 2}, 8))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep := NewReport(mapNamer{}, func(*Branch) {})
		rep.EnableStacks()
		var counted uint64
		for len(b) >= 6 {
			major := trace.MajorITraceU
			if b[0]&1 != 0 {
				major = trace.MajorITraceK
			}
			minor := uint32(b[0]>>1) % 12
			addr := uint64(b[1]&7)<<12 | uint64(b[2])
			count := uint64(b[3])
			r := &trace.Record{Major: major, Minor: minor, CPU: int(b[4] & 3),
				Fixed: []uint64{addr, count, uint64(b[5]), uint64(binary.LittleEndian.Uint16(b[4:6]) % 400), uint64(b[5] & 3)}}
			if major == trace.MajorITraceU && (minor == trace.ITraceStart || minor == trace.ITraceEnd || minor == trace.ITraceThread) {
				r.Fixed = []uint64{uint64(b[1] & 3), uint64(b[2] & 3), addr, count, uint64(b[5])}
			}
			before := rep.Instructions + rep.Unattributed
			rep.Apply(r)
			counted += rep.Instructions + rep.Unattributed - before
			b = b[6:]
		}
		rep.Finish()
		if counted != rep.Instructions+rep.Unattributed {
			t.Fatalf("counted %d, report %d + %d", counted, rep.Instructions, rep.Unattributed)
		}
		var sum uint64
		for _, fs := range rep.Funcs {
			sum += fs.Exclusive
		}
		if sum != rep.Instructions {
			t.Fatalf("functions hold %d instructions, report %d", sum, rep.Instructions)
		}
		var out bytes.Buffer
		if err := rep.WriteCallgrind(&out, "fuzz"); err != nil {
			t.Fatal(err)
		}
		if err := rep.WriteFolded(&out); err != nil {
			t.Fatal(err)
		}
	})
}
