package a2n

import (
	"bytes"
	"debug/elf"
	"fmt"

	"golang.org/x/sys/unix"

	"perfinsp/internal/procmaps"
)

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// vdsoModule returns the parsed vDSO for a trace recorded on kernel
// release rel, or a module whose Err says why there is none.
//
// The vDSO is not a file: post cannot read the traced process's image.
// The kernel maps one image, built into the kernel, into every process, so
// the [vdso] of post's own process is the traced processes' image when the
// trace was recorded on the kernel post runs on. The resolver reads it
// (procmaps.SelfVDSO) only when the trace's kernel release (its header)
// equals this kernel's; otherwise [vdso] stays one unnamed row. (A 32-bit
// process's vDSO is a different image: its addresses then fall outside the
// 64-bit image's symbols or get wrong names; 64-bit only.)
func vdsoModule(rel string) *Module {
	m := &Module{Path: "[vdso]"}
	here := kernelRelease()
	if rel == "" || rel != here {
		m.Err = fmt.Errorf("[vdso]: the trace's kernel %q is not the running kernel %q, whose vDSO post reads; vDSO addresses stay unnamed", rel, here)
		return m
	}
	img, err := procmaps.SelfVDSO()
	if err != nil {
		m.Err = fmt.Errorf("[vdso]: %w", err)
		return m
	}
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		m.Err = fmt.Errorf("[vdso]: %w", err)
		return m
	}
	m.fromELF(f, false, "")
	return m
}
