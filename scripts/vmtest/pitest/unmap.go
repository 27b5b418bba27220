package main

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/format/trace"
	"perfinsp/libperfutil/control"
)

// unmapCheck maps a file executable while tracing and unmaps it: the trace
// must describe the segment when it is mapped (MTE_SEGMENT) and its unmap
// (MTE_UNMAP), both for this process.
func unmapCheck(path string) error {
	f, err := control.Open("kmod")
	if err != nil {
		return err
	}
	defer f.Close()
	_ = f.Free()
	if err := f.SetMode(control.ModeNormal, ""); err != nil {
		return err
	}
	if err := f.Init(control.Config{TraceBufSize: 64 << 10, MTEBufSize: 256 << 10}); err != nil {
		return err
	}
	if err := f.On(); err != nil {
		return err
	}
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	const size = 8192
	mem, err := unix.Mmap(int(file.Fd()), 0, size, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE)
	file.Close()
	if err != nil {
		return fmt.Errorf("mmap %s executable: %w", path, err)
	}
	addr := uint64(uintptrOf(mem))
	if err := unix.Munmap(mem); err != nil {
		return err
	}
	if err := f.Off(); err != nil {
		return err
	}
	out := "/tmp/unmap.nrm2"
	if err := f.Get(out); err != nil {
		return err
	}
	s, err := load(out)
	if err != nil {
		return err
	}
	pid := uint64(os.Getpid())
	var mapped, unmapped bool
	for _, r := range s.recs {
		if r.Major != trace.MajorMTE || r.Field(0) != pid {
			continue
		}
		switch r.Minor {
		case trace.MTESegment:
			mapped = mapped || (r.Field(1) == addr && r.Field(2) == size && r.Str == path)
		case trace.MTEUnmap:
			unmapped = unmapped || (r.Field(1) == addr && r.Field(2) == size)
		}
	}
	fmt.Printf("unmap: %s mapped executable at %#x: MTE_SEGMENT %v, MTE_UNMAP %v\n", path, addr, mapped, unmapped)
	if !mapped || !unmapped {
		return fmt.Errorf("the executable mapping of %s was not traced (segment %v, unmap %v)", path, mapped, unmapped)
	}
	return f.Free()
}

func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }
