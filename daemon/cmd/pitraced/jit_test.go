package main

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"

	"perfinsp/daemon/facility"
	"perfinsp/format/trace"
	"perfinsp/internal/daemonproto"
)

type jrec struct {
	t      uint64
	major  uint16
	minor  uint32
	fields []uint64
	str    string
}

// enc builds an agent's stream: a TIME_HIGH record wherever the high half
// of the time changes, then each record in the trace's layout.
func enc(t *testing.T, recs ...jrec) []byte {
	t.Helper()
	var b []byte
	high := ^uint64(0)
	for _, r := range recs {
		var err error
		if r.t>>32 != high {
			high = r.t >> 32
			if b, err = trace.Encode(b, trace.MajorSys, trace.SysTimeHigh, trace.LayoutFixed, r.t, []uint64{high}, ""); err != nil {
				t.Fatal(err)
			}
		}
		layout := trace.LayoutWords
		if spec := trace.Lookup(r.major, r.minor); spec != nil {
			layout = spec.Layout
		}
		if b, err = trace.Encode(b, r.major, r.minor, layout, r.t, r.fields, r.str); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// sinkOf gives fn every record of a stream decoded: a run of method
// events is checked to be whole records of facility.EventSize bytes of
// the run's time-high half, and read back.
func sinkOf(t testing.TB, fn func(i int, tm uint64, major uint16, minor uint32, fields []uint64, str string)) jprofSink {
	return jprofSink{put: fn, events: func(i int, recs []byte, tm uint64) {
		if len(recs) == 0 || len(recs)%facility.EventSize != 0 {
			t.Errorf("record %d: a run of %d bytes", i, len(recs))
			return
		}
		for k := 0; k < len(recs); k += facility.EventSize {
			r, n, err := trace.Decode(recs[k:k+facility.EventSize], 0)
			if err != nil || n != facility.EventSize || r.Layout != trace.LayoutWords {
				t.Errorf("record %d: an event of %d bytes, layout %d: %v", i, n, r.Layout, err)
				return
			}
			if k == 0 && uint32(r.Time) != uint32(tm) {
				t.Errorf("record %d: time %#x in the record, %#x given", i, r.Time, tm)
			}
			fn(i+k/facility.EventSize, tm&^0xffffffff|r.Time, r.Major, r.Minor, r.Fixed, r.Str)
		}
	}}
}

// The agent's binary stream: every JProf record comes out with its full
// time (across a change of the time's high half), the caller's pid in
// place of the one written, its fields and name; anything else, a record
// in another layout, or bytes that are no record end the stream with an
// error naming the record.
func TestReadJProfStream(t *testing.T) {
	const t0 = 5<<32 | 0xfffffff0
	good := []jrec{
		{t0, trace.MajorJITLoad, trace.JITLoad, []uint64{999, 12, 0x7f0000001000, 0x80}, "Hot.loop"},
		{t0 + 1, trace.MajorJITLoad, trace.JITMethod, []uint64{999, 0x7f00deadbeef}, "Work.hot(I)V"},
		{t0 + 2, trace.MajorInterp, 0x10, []uint64{999, 12, 0xdeadbeef, 0x7f00}, ""},
		{t0 + 0x20, trace.MajorJitted, 0x80000010, []uint64{999, 12, 0xdeadbeef, 0x7f00}, ""},
		{t0 + 0x21, trace.MajorJITLoad, trace.JITUnload, []uint64{999, 0x7f0000001000, 0x80}, ""},
	}
	var got []jrec
	err := readJProfStream(enc(t, good...), 42, sinkOf(t, func(i int, tm uint64, major uint16, minor uint32, fields []uint64, str string) {
		got = append(got, jrec{tm, major, minor, append([]uint64(nil), fields...), str})
	}))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(good) {
		t.Fatalf("%d records read, want %d: %v", len(got), len(good), got)
	}
	for i, g := range got {
		w := good[i]
		if g.t != w.t || g.major != w.major || g.minor != w.minor || g.str != w.str || g.fields[0] != 42 || len(g.fields) != len(w.fields) {
			t.Errorf("record %d: %+v, want %+v with pid 42", i, g, w)
			continue
		}
		for k := 1; k < len(w.fields); k++ {
			if g.fields[k] != w.fields[k] {
				t.Errorf("record %d field %d: %#x, want %#x", i, k, g.fields[k], w.fields[k])
			}
		}
	}

	long := strings.Repeat("x", 3000)
	err = readJProfStream(enc(t, jrec{t0, trace.MajorJITLoad, trace.JITMethod, []uint64{1, 2}, long}), 42, sinkOf(t, func(i int, tm uint64, major uint16, minor uint32, fields []uint64, str string) {
		if len(str) != 1024 {
			t.Errorf("a %d-byte name kept as %d bytes, want 1024", len(long), len(str))
		}
	}))
	if err != nil {
		t.Fatal(err)
	}

	hostile := map[string][]byte{
		"a tick":               enc(t, good[0], jrec{t0, trace.MajorTprof, trace.TprofTick, []uint64{1, 2, 3, 4}, ""}),
		"a 3-word event":       enc(t, jrec{t0, trace.MajorInterp, 0x10, []uint64{1, 2, 3}, ""}),
		"truncated":            enc(t, good...)[:40],
		"garbage":              []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14},
		"an unknown JIT minor": enc(t, jrec{t0, trace.MajorJITLoad, 77, []uint64{1}, ""}),
	}
	// JIT_UNLOAD written in the words layout (its code's layout is fixed)
	b, _ := trace.Encode(nil, trace.MajorJITLoad, trace.JITUnload, trace.LayoutWords, t0, []uint64{1, 2, 3}, "")
	hostile["a record in the wrong layout"] = b
	ev := enc(t, jrec{t0, trace.MajorInterp, 0x10, []uint64{1, 2, 3, 4}, ""})
	hostile["a 5-word event"] = enc(t, jrec{t0, trace.MajorInterp, 0x10, []uint64{1, 2, 3, 4, 5}, ""})
	hostile["an event cut short"] = ev[:len(ev)-4]
	hostile["an event whose length runs past the stream"] = lieLen(ev, trace.TimeHighSize, trace.LayoutWords, facility.EventSize+8)
	hostile["an event of a length shorter than the header"] = lieLen(ev, trace.TimeHighSize, trace.LayoutWords, 4)
	hostile["an event in the fixed layout"] = lieLen(ev, trace.TimeHighSize, trace.LayoutFixed, facility.EventSize)
	for name, s := range hostile {
		n := 0
		err := readJProfStream(s, 42, sinkOf(t, func(int, uint64, uint16, uint32, []uint64, string) { n++ }))
		if err == nil {
			t.Errorf("%s: accepted (%d records)", name, n)
		} else {
			t.Logf("%s: %v (%d records before)", name, err, n)
		}
	}
}

// lieLen returns a copy of stream whose record at off says layout and n bytes.
func lieLen(stream []byte, off, layout, n int) []byte {
	b := append([]byte(nil), stream...)
	binary.LittleEndian.PutUint16(b[off:], uint16(layout)<<12|uint16(n/4))
	return b
}

// Method events reach the trace as the agent encoded them, a run of them
// at once, but with the caller's pid, whatever pid the agent wrote: the
// pid is replaced in the bytes handed on.
func TestReadJProfStreamEventPid(t *testing.T) {
	recs := []jrec{{7 << 32, trace.MajorJitted, 0x80000010, []uint64{1, 99, 0xabc, 0xdef}, ""},
		{7<<32 | 5, trace.MajorInterp, 0x10, []uint64{3, 98, 0xabd, 0}, ""}}
	s := enc(t, recs...)
	for i := range recs {
		recs[i].fields[0] = 42
	}
	want := enc(t, recs...)[trace.TimeHighSize:]
	n := 0
	err := readJProfStream(s, 42, jprofSink{
		put: func(i int, _ uint64, major uint16, minor uint32, _ []uint64, _ string) {
			t.Errorf("record %d (0x%x/0x%x) decoded, not given as it is", i, major, minor)
		},
		events: func(i int, run []byte, tm uint64) {
			n++
			if !bytes.Equal(run, want) || tm != 7<<32 || i != 1 { // record 0: the TIME_HIGH
				t.Errorf("events from %d: %x at %#x, want %x at %#x", i, run, tm, want, uint64(7<<32))
			}
		},
	})
	if err != nil || n != 1 {
		t.Fatalf("%d runs of events, %v", n, err)
	}
}

// The daemon's reading of an agent's chunk, per record (method events).
func BenchmarkReadJProfStream(b *testing.B) {
	t := &testing.T{}
	var recs []jrec
	for i := 0; i < 2300; i++ {
		recs = append(recs, jrec{uint64(1e12 + i), trace.MajorInterp, 0x10, []uint64{1, 2, uint64(i), 0}, ""})
	}
	s := enc(t, recs...)
	b.SetBytes(int64(len(s)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		_ = readJProfStream(s, 42, jprofSink{put: func(int, uint64, uint16, uint32, []uint64, string) { n++ }, events: func(_ int, b []byte, _ uint64) { n += len(b) / facility.EventSize }})
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
}

// The agent's request form is read without the general JSON decoding, to
// the same arguments; any other form goes to the general decoding; a bad
// CPU or base64 is an error.
func TestStreamArgs(t *testing.T) {
	raw := enc(t, jrec{1 << 33, trace.MajorInterp, 0x10, []uint64{1, 2, 3, 4}, ""})
	args, _ := json.Marshal(daemonproto.JProfArgs{CPU: 1, Stream: raw})
	agent := `{"cpu":1,"stream":"` + base64.StdEncoding.EncodeToString(raw) + `"}`
	var want daemonproto.JProfArgs
	if err := json.Unmarshal([]byte(agent), &want); err != nil || want.CPU != 1 || !bytes.Equal(want.Stream, raw) {
		t.Fatalf("the agent's form does not decode as JSON: %v", err)
	}
	cpu, stream, ok, err := streamArgs([]byte(agent))
	if !ok || err != nil || cpu != 1 || !bytes.Equal(stream, raw) {
		t.Fatalf("the agent's form: cpu %d ok %v err %v, %d bytes, want cpu 1 and the %d bytes", cpu, ok, err, len(stream), len(raw))
	}
	for _, other := range []string{string(args), `{"records":[]}`, `{"stream":"AAAA","cpu":1}`, `{"cpu":1,"stream":"AA\u0041A"}`, `{"cpu":1,"stream":"AAAA","x":"y"}`, `{"cpu":1}`} {
		if _, _, ok, _ := streamArgs([]byte(other)); ok && other != string(args) {
			t.Errorf("%s: taken by the fast path", other)
		}
	}
	for _, bad := range []string{`{"cpu":x,"stream":"AAAA"}`, `{"cpu":1,"stream":"A*AA"}`, `{"cpu":99999999999999999999,"stream":"AAAA"}`} {
		if _, _, ok, err := streamArgs([]byte(bad)); ok && err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// A run of method events ends at a record whose header lies about its
// length (longer, within the stream; or shorter than a record): the events
// before it are given, then the error.
func TestReadJProfStreamRunEndsAtALie(t *testing.T) {
	var recs []jrec
	for i := 0; i < 5; i++ {
		recs = append(recs, jrec{9<<32 | uint64(i), trace.MajorInterp, 0x10, []uint64{1, 2, uint64(i), 0}, ""})
	}
	for _, size := range []int{facility.EventSize + 8, 8, 0} {
		s := lieLen(enc(t, recs...), trace.TimeHighSize+3*facility.EventSize, trace.LayoutWords, size)
		n := 0
		err := readJProfStream(s, 42, sinkOf(t, func(int, uint64, uint16, uint32, []uint64, string) { n++ }))
		if err == nil || n != 3 {
			t.Errorf("an event saying %d bytes after 3: %d given, %v", size, n, err)
		}
	}
}
