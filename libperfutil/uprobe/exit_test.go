package uprobe

import (
	"os"
	"reflect"
	"runtime"
	"testing"

	"golang.org/x/arch/x86/x86asm"
	"golang.org/x/sys/unix"

	"perfinsp/internal/perfring"
)

// An entry probe and an exit probe (a plain uprobe on the return
// instruction, OpenOpts.Exit) sampling the stack pointer and R14: every
// call gives an entry then an exit, at the same stack pointer (the return
// address's slot), with the same goroutine in R14; the goroutine's stack
// is left as it was (no return address replaced), so the Go runtime may
// walk it meanwhile.
func TestExitProbeOnReturnInstruction(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the return instruction is found for x86-64 only")
	}
	if os.Geteuid() != 0 {
		t.Skip("uprobe perf events need root or CAP_PERFMON; run the test as root")
	}
	p, err := System()
	if err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	entry := uint64(reflect.ValueOf(probed).Pointer())
	path, off := fileOffset(t, entry)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	code := make([]byte, 64)
	_, err = f.ReadAt(code, int64(off))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ret := -1
	for pc := 0; pc < len(code) && ret < 0; {
		in, err := x86asm.Decode(code[pc:], 64)
		if err != nil {
			t.Fatalf("decode probed+%#x: %v", pc, err)
		}
		if in.Op == x86asm.RET {
			ret = pc
		}
		pc += in.Len
	}
	if ret < 0 {
		t.Fatal("no return instruction in probed's first 64 bytes")
	}
	tid := unix.Gettid()
	in, err := p.OpenWith(path, off, false, tid, OpenOpts{Disabled: true, Group: -1, Regs: RegSP | RegR14})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := p.OpenWith(path, off+uint64(ret), false, tid, OpenOpts{Disabled: true, Group: -1, Exit: true, Regs: RegSP | RegR14})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if !out.Ret || in.Ret {
		t.Fatalf("Ret: entry %v, exit %v; want false, true", in.Ret, out.Ret)
	}
	if _, err := p.OpenWith(path, off, true, tid, OpenOpts{Group: -1, Exit: true}); err == nil {
		t.Fatal("an exit probe asked as a uretprobe was opened")
	}
	ring, err := perfring.Map(in.FD, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	if err := ring.Redirect(out.FD); err != nil {
		t.Fatal(err)
	}
	for _, pr := range []*Probe{in, out} {
		if err := Enable(pr.FD); err != nil {
			t.Fatal(err)
		}
	}
	const calls = 50
	_ = callProbed(calls)
	var got []Sample
	ring.Drain(func(typ uint32, _ uint16, b []byte) {
		if typ != unix.PERF_RECORD_SAMPLE {
			return
		}
		id, _ := SampleID(b)
		s, ok := Decode(b, Layout{Stack: id == in.ID, Regs: 2})
		if !ok || !s.HasRegs || (id != in.ID && id != out.ID) {
			t.Fatalf("bad sample %+v ok %v", s, ok)
		}
		got = append(got, s)
	})
	if len(got) != 2*calls {
		t.Fatalf("%d samples for %d calls, want an entry and an exit each", len(got), calls)
	}
	for i := 0; i < len(got); i += 2 {
		e, x := got[i], got[i+1]
		if e.ID != in.ID || x.ID != out.ID || e.Regs[0] != x.Regs[0] || e.Regs[1] != x.Regs[1] || e.Regs[1] != got[0].Regs[1] || x.Time < e.Time {
			t.Fatalf("call %d: entry %+v, exit %+v: want the same stack pointer and R14, the exit after the entry", i/2, e, x)
		}
	}
}
