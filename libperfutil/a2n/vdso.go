package a2n

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/procmaps"
)

// The vDSO is not a file: post cannot read the traced process's image.
// The kernel maps one image, built into the kernel, into every process, so
// the [vdso] of post's own process is the traced processes' image when the
// trace was recorded on the kernel post runs on. The resolver reads it
// from /proc/self (auxv's AT_SYSINFO_EHDR, the [vdso] line of maps, the
// bytes from /proc/self/mem) only when the trace's kernel release (its
// header) equals this kernel's; otherwise [vdso] stays one unnamed row.
// (A 32-bit process's vDSO is a different image: its addresses then fall
// outside the 64-bit image's symbols or get wrong names; 64-bit only.)

const atSysinfoEHDR = 33

// selfVDSO returns this process's vDSO image.
func selfVDSO() ([]byte, error) {
	auxv, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return nil, err
	}
	var base uint64
	for i := 0; i+16 <= len(auxv); i += 16 {
		if binary.NativeEndian.Uint64(auxv[i:]) == atSysinfoEHDR {
			base = binary.NativeEndian.Uint64(auxv[i+8:])
		}
	}
	if base == 0 {
		return nil, fmt.Errorf("no vDSO in this process's auxiliary vector")
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	var size uint64
	_ = procmaps.Executable(maps, func(m procmaps.Mapping) {
		if m.Path == "[vdso]" && m.Start == base && m.End > m.Start && m.End-m.Start <= 1<<20 {
			size = m.End - m.Start
		}
	})
	if size == 0 {
		return nil, fmt.Errorf("the vDSO at %#x is not in /proc/self/maps", base)
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	img := make([]byte, size)
	if _, err := mem.ReadAt(img, int64(base)); err != nil {
		return nil, fmt.Errorf("read the vDSO from /proc/self/mem: %w", err)
	}
	return img, nil
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}

// vdsoModule returns the parsed vDSO for a trace recorded on kernel
// release rel, or a module whose Err says why there is none.
func vdsoModule(rel string) *Module {
	m := &Module{Path: "[vdso]"}
	here := kernelRelease()
	if rel == "" || rel != here {
		m.Err = fmt.Errorf("[vdso]: the trace's kernel %q is not the running kernel %q, whose vDSO post reads; vDSO addresses stay unnamed", rel, here)
		return m
	}
	img, err := selfVDSO()
	if err != nil {
		m.Err = fmt.Errorf("[vdso]: %w", err)
		return m
	}
	f, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		m.Err = fmt.Errorf("[vdso]: %w", err)
		return m
	}
	m.fromELF(f, false)
	return m
}
