package procmaps

import (
	"encoding/binary"
	"fmt"
	"os"
)

// atSysinfoEHDR is the auxiliary vector's entry for the vDSO's address.
const atSysinfoEHDR = 33

// SelfVDSO returns this process's vDSO image (auxv's AT_SYSINFO_EHDR, the
// [vdso] line of /proc/self/maps, the bytes from /proc/self/mem). The
// kernel maps the same image into every 64-bit process, so it stands for
// the traced processes' on the kernel it was read on.
func SelfVDSO() ([]byte, error) {
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
	_ = Executable(maps, func(m Mapping) {
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
