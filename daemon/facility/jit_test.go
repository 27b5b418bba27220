package facility

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/testenv"
	"perfinsp/libperfutil/control"
)

// JProf records: JIT records are kept with tprof enabled (they name its
// ticks), method events only when their major is enabled; other majors,
// unknown JIT minors and malformed events are refused; nothing is written
// while tracing is off.
func TestJProfRecords(t *testing.T) {
	for _, interp := range []bool{false, true} {
		f, _, _ := newFake(t)
		if err := f.Init(control.Config{TraceBufSize: 1 << 20, MTEBufSize: 1 << 16}); err != nil {
			t.Fatal(err)
		}
		if interp {
			if err := f.Enable([]uint16{trace.MajorInterp}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.JProf(Writer{Root: true}, 0, Now(), trace.MajorJITLoad, trace.JITLoad, []uint64{42, 43, 0x1000, 0x10}, "off"); err == nil {
			t.Fatal("a JIT record was taken while tracing is off")
		}
		if err := on(t, f); err != nil {
			t.Fatal(err)
		}
		mustWrite := func(want bool, major uint16, minor uint32, fields []uint64, str string) {
			t.Helper()
			ok, err := f.JProf(Writer{Root: true}, 0, Now(), major, minor, fields, str)
			if err != nil || ok != want {
				t.Fatalf("JProf 0x%x/0x%x: written %v err %v, want written %v", major, minor, ok, err, want)
			}
		}
		mustWrite(true, trace.MajorJITLoad, trace.JITLoad, []uint64{42, 43, 0x1000, 0x10}, "Hot.loop")
		mustWrite(true, trace.MajorJITLoad, trace.JITMethod, []uint64{42, 7}, "Hot.loop")
		mustWrite(interp, trace.MajorInterp, 0x10, []uint64{42, 43, 7, 0}, "")
		for _, bad := range []struct {
			major  uint16
			minor  uint32
			fields []uint64
		}{{trace.MajorTprof, trace.TprofTick, []uint64{42, 43, 1, 0}}, {trace.MajorJITLoad, 9, []uint64{42}}, {trace.MajorInterp, 0x10, []uint64{42}}} {
			if ok, err := f.JProf(Writer{Root: true}, 0, Now(), bad.major, bad.minor, bad.fields, ""); err == nil && (ok || bad.major != trace.MajorInterp || interp) {
				t.Errorf("record 0x%x/0x%x %v accepted (written %v)", bad.major, bad.minor, bad.fields, ok)
			}
		}
		if err := f.Off(); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "j.nrm2")
		if err := get(t, f, path); err != nil {
			t.Fatal(err)
		}
		nf, err := nrm2.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		_ = nf.Records(func(r *trace.Record) error {
			if r.Major == trace.MajorJITLoad || r.Major == trace.MajorInterp {
				got = append(got, trace.Format(r))
			}
			return nil
		})
		nf.Close()
		want := 2
		if interp {
			want = 3
		}
		if len(got) != want {
			t.Fatalf("0x30 enabled %v: records %q, want the JIT_LOAD, the JIT_METHOD (and the method entry when enabled)", interp, got)
		}
	}
}

// Records written into a running trace (hooks, JProf records) come only
// from the user holding it, or root: another user's are refused with
// ErrNotOwner and not counted, not even as lost once a full buffer stopped
// tracing.
func TestRecordsOnlyFromHolder(t *testing.T) {
	f, _, _ := newFake(t)
	if err := f.Init(control.Config{TraceBufSize: 1 << 16, MTEBufSize: 1 << 16}); err != nil {
		t.Fatal(err)
	}
	const holder, other = 1000, 1001
	if err := f.On(nil, holder); err != nil {
		t.Fatal(err)
	}
	jit := func(w Writer) error {
		_, err := f.JProf(w, 0, Now(), trace.MajorJITLoad, trace.JITMethod, []uint64{42, 7}, "Hot.loop")
		return err
	}
	hook := func(w Writer) error { return f.Hook(w, 0, Now(), 0x100, 7, []uint32{1}, "") }
	before, _ := f.Info()
	for name, write := range map[string]func(Writer) error{"hook": hook, "jprof": jit} {
		if err := write(Writer{UID: other}); !errors.Is(err, control.ErrNotOwner) || !strings.Contains(err.Error(), "uid 1000") {
			t.Errorf("%s by uid %d into uid %d's trace: %v, want refused naming the holder", name, other, holder, err)
		}
		if err := f.MayWrite(Writer{UID: other}); !errors.Is(err, control.ErrNotOwner) {
			t.Errorf("MayWrite by uid %d: %v", other, err)
		}
		if err := write(Writer{UID: holder}); err != nil {
			t.Errorf("%s by the holder: %v", name, err)
		}
		if err := write(Writer{UID: 0, Root: true}); err != nil {
			t.Errorf("%s by root: %v", name, err)
		}
	}
	after, _ := f.Info()
	if got := after.CPUs[0].Records - before.CPUs[0].Records; got != 4 {
		t.Errorf("%d records written, want the holder's and root's 4", got)
	}
	// A buffer filled and tracing stopped: another user's record is not
	// counted as lost in the holder's trace.
	f.mu.Lock()
	f.full = true
	f.mu.Unlock()
	if err := f.Off(); err != nil {
		t.Fatal(err)
	}
	lost := after.CPUs[0].Lost
	_ = jit(Writer{UID: other})
	if st, _ := f.Info(); st.CPUs[0].Lost != lost {
		t.Fatalf("another user's record counted as lost: %d, was %d", st.CPUs[0].Lost, lost)
	}
}

// Hooks that fill a buffer in normal mode stop tracing, as every other
// record does: info says so and off has nothing left to stop.
func TestHooksFillingTheBufferStopTracing(t *testing.T) {
	f, _, _ := newFake(t)
	if err := f.Init(control.Config{TraceBufSize: 4 << 10, MTEBufSize: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	w := Writer{Root: true}
	for i := 0; i < 100 && f.State() == control.StateOn; i++ {
		// (tracing may stop between the loop's test and the hook)
		if err := f.Hook(w, 0, Now(), 0x100, 1, nil, strings.Repeat("x", 200)); err != nil && f.State() == control.StateOn {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, "tracing to stop", func() bool { return f.State() == control.StateOff })
	if st, _ := f.Info(); !st.StoppedFull {
		t.Fatalf("tracing stopped without saying a buffer filled: %+v", st)
	}
}

// TestJProfBatchFillingTheBuffer: a batch of method events larger than a
// normal-mode buffer writes what fits, stops tracing, and counts every
// other record of the batch lost: written and lost make the batch; the
// same whether the events are put decoded, as they are encoded, or in runs.
func TestJProfBatchFillingTheBuffer(t *testing.T) {
	for _, route := range []string{"Put", "PutEvent", "PutEvents"} {
		f, _, _ := newFake(t)
		if err := f.Init(control.Config{TraceBufSize: 4 << 10, MTEBufSize: 64 << 10}); err != nil {
			t.Fatal(err)
		}
		if err := f.Enable([]uint16{trace.MajorInterp}); err != nil {
			t.Fatal(err)
		}
		if err := on(t, f); err != nil {
			t.Fatal(err)
		}
		const n = 2000
		written, refused := 0, 0
		err := f.JProfBatch(Writer{Root: true}, 0, func(b *JProfBatch) error {
			if route == "PutEvents" { // runs of 50
				for i := 0; i < n; i += 50 {
					var run []byte
					for k := i; k < i+50; k++ {
						run = append(run, event(t, trace.MajorInterp, 7, uint64(k))...)
					}
					k, err := b.PutEvents(run, Now()&^0xffffffff)
					written += k
					if err != nil {
						refused += 50 - k
					}
				}
				return nil
			}
			for i := 0; i < n; i++ {
				var ok bool
				var err error
				if route == "PutEvent" {
					ok, err = b.PutEvent(event(t, trace.MajorInterp, 7, uint64(i)), Now())
				} else {
					ok, err = b.Put(Now(), trace.MajorInterp, 0x10, []uint64{7, 7, uint64(i), 0}, "")
				}
				switch {
				case ok:
					written++
				case err != nil:
					refused++
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, "tracing to stop", func() bool { return f.State() == control.StateOff })
		st, _ := f.Info()
		if !st.StoppedFull || written == 0 || written >= n || refused == 0 {
			t.Fatalf("%s: %d of %d written, %d refused after the buffer filled; %+v", route, written, n, refused, st)
		}
		if lost := st.CPUs[0].Lost; int(lost) != n-written {
			t.Fatalf("%s: %d written, %d counted lost: want %d in all", route, written, lost, n)
		}
	}
}

// event encodes a method entry of pid 7.
func event(t *testing.T, major uint16, tid, id uint64) []byte {
	t.Helper()
	b, err := trace.Encode(nil, major, 0x10, trace.LayoutWords, 0, []uint64{7, tid, id & 0xffffffff, id >> 32}, "")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// PutEvent writes a method event as it is encoded when its major is
// enabled (the bytes read back as the record, at the time given), drops
// it without an error when its major is not, and refuses bytes that are
// not one 4-word event of a method major; nothing while tracing is off.
func TestJProfPutEvent(t *testing.T) {
	f, _, _ := newFake(t)
	if err := f.Init(control.Config{TraceBufSize: 1 << 20, MTEBufSize: 1 << 16}); err != nil {
		t.Fatal(err)
	}
	if err := f.Enable([]uint16{trace.MajorJitted}); err != nil {
		t.Fatal(err)
	}
	put := func(rec []byte) (bool, error) {
		var ok bool
		err := f.JProfBatch(Writer{Root: true}, 0, func(b *JProfBatch) error {
			var err error
			ok, err = b.PutEvent(rec, 5<<32|9)
			return err
		})
		return ok, err
	}
	good := event(t, trace.MajorJitted, 3, 0xabc<<32|0xdef)
	if ok, err := put(good); ok || err == nil {
		t.Fatalf("an event taken while tracing is off: %v %v", ok, err)
	}
	if err := on(t, f); err != nil {
		t.Fatal(err)
	}
	if ok, err := put(good); !ok || err != nil {
		t.Fatalf("an enabled event: written %v, %v", ok, err)
	}
	if ok, err := put(event(t, trace.MajorInterp, 3, 1)); ok || err != nil {
		t.Fatalf("an event of a major not enabled: written %v, %v", ok, err)
	}
	fiveWords, _ := trace.Encode(nil, trace.MajorJitted, 0x10, trace.LayoutWords, 0, []uint64{7, 3, 1, 0, 9}, "")
	tick, _ := trace.Encode(nil, trace.MajorTprof, trace.TprofTick, trace.LayoutWords, 0, []uint64{7, 3, 1, 0}, "")
	fixed := append([]byte(nil), good...)
	fixed[1] &^= 0xf0 // the fixed layout
	lying := append([]byte(nil), good...)
	lying[0]++ // a length of 32 bytes in 28
	for name, rec := range map[string][]byte{"5 words": fiveWords, "a tick": tick, "the fixed layout": fixed, "a lying length": lying, "cut": good[:20], "empty": nil} {
		if ok, err := put(rec); ok || err == nil {
			t.Errorf("%s: written %v, err %v", name, ok, err)
		}
	}
	// a run: the interpreted events (not enabled) left out, the run ended
	// by a record that is no event
	var run []byte
	for i := 0; i < 6; i++ {
		major := trace.MajorJitted
		if i%3 == 1 {
			major = trace.MajorInterp
		}
		run = append(run, event(t, major, 4, uint64(100+i))...)
	}
	run = append(run, tick...)
	run = append(run, event(t, trace.MajorJitted, 4, 200)...)
	var nrun int
	var runErr error
	if err := f.JProfBatch(Writer{Root: true}, 0, func(b *JProfBatch) error {
		nrun, runErr = b.PutEvents(run, 6<<32)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if nrun != 4 || runErr == nil {
		t.Fatalf("a run of 4 jitted events, 2 interpreted, a tick, 1 jitted: %d written, %v; want 4 and an error", nrun, runErr)
	}
	recs := readBack(t, f)
	var got []trace.Record
	var ids []uint64
	for _, r := range recs {
		if r.Major == trace.MajorJitted && r.Fixed[1] == 3 {
			got = append(got, r)
		} else if r.Major == trace.MajorJitted {
			ids = append(ids, r.Fixed[2])
			if r.Time>>32 != 6 {
				t.Errorf("an event of the run at %#x, not in its time-high half 6", r.Time)
			}
		}
	}
	if fmt.Sprint(ids) != "[100 102 103 105]" {
		t.Errorf("the run's events read back: %v, want [100 102 103 105]", ids)
	}
	if len(got) != 1 || got[0].Time != 5<<32|9 || got[0].Minor != 0x10 || len(got[0].Fixed) != 4 ||
		got[0].Fixed[0] != 7 || got[0].Fixed[1] != 3 || got[0].Fixed[2] != 0xdef || got[0].Fixed[3] != 0xabc {
		t.Fatalf("read back %+v, want the one event at %#x", got, uint64(5<<32|9))
	}
}

// readBack turns tracing off and returns the trace's records.
func readBack(t *testing.T, f *Facility) []trace.Record {
	t.Helper()
	if err := f.Off(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "r.nrm2")
	if err := get(t, f, path); err != nil {
		t.Fatal(err)
	}
	nf, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer nf.Close()
	var out []trace.Record
	if err := nf.Records(func(r *trace.Record) error {
		x := *r
		x.Fixed = append([]uint64(nil), r.Fixed...)
		out = append(out, x)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A frame's method events into a wrap-mode trace buffer, per record:
// decoded (Put), as encoded (PutEvent), as a run (PutEvents).
func BenchmarkJProfBatchEvents(b *testing.B) {
	for _, name := range []string{"Put", "PutEvent", "PutEvents"} {
		b.Run(name, func(b *testing.B) {
			f, _, _ := newFake(&testing.T{})
			f.mode = control.ModeWrap
			if err := f.Init(control.Config{TraceBufSize: 1 << 20, MTEBufSize: 1 << 16}); err != nil {
				b.Fatal(err)
			}
			if err := f.Enable([]uint16{trace.MajorInterp}); err != nil {
				b.Fatal(err)
			}
			f.mu.Lock()
			f.state = control.StateOn
			f.mu.Unlock()
			rec, _ := trace.Encode(nil, trace.MajorInterp, 0x10, trace.LayoutWords, 0, []uint64{7, 7, 1, 0}, "")
			fields := []uint64{7, 7, 1, 0}
			const n = 2300
			tm := Now()
			var run []byte
			for k := 0; k < n; k++ {
				run = append(run, rec...)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = f.JProfBatch(Writer{Root: true}, 0, func(jb *JProfBatch) error {
					if name == "PutEvents" {
						_, err := jb.PutEvents(run, tm)
						return err
					}
					for k := 0; k < n; k++ {
						if name == "PutEvent" {
							_, _ = jb.PutEvent(rec, tm+uint64(k))
						} else {
							_, _ = jb.Put(tm+uint64(k), trace.MajorInterp, 0x10, fields, "")
						}
					}
					return nil
				})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
	}
}
