package facility

import (
	"path/filepath"
	"testing"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
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
		if _, err := f.JProf(0, Now(), trace.MajorJITLoad, trace.JITLoad, []uint64{42, 43, 0x1000, 0x10}, "off"); err == nil {
			t.Fatal("a JIT record was taken while tracing is off")
		}
		if err := on(t, f); err != nil {
			t.Fatal(err)
		}
		mustWrite := func(want bool, major uint16, minor uint32, fields []uint64, str string) {
			t.Helper()
			ok, err := f.JProf(0, Now(), major, minor, fields, str)
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
			if ok, err := f.JProf(0, Now(), bad.major, bad.minor, bad.fields, ""); err == nil && (ok || bad.major != trace.MajorInterp || interp) {
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
