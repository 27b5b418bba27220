package a2n

import (
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
)

// A module file is mapped, not read: its symbol and string tables and its
// .eh_frame are used where they lie (page-cache pages), with no copy into
// fresh memory, which is what loading a module cost most (a large
// library's tables are megabytes, touched once). The file is untrusted
// and can shrink while it is mapped: a read past its new end faults
// (SIGBUS), which the goroutine reading it turns into a panic
// (debug.SetPanicOnFault) that loadModule recovers as a malformed module;
// names found later are read under the same protection (Module.Symbol).

// mappedFile is a read-only mapping of a whole file, read as an
// io.ReaderAt (debug/elf's parser) or sliced directly (sectionData).
type mappedFile struct {
	data []byte
}

// mapFile maps f (size bytes); nil when it cannot be mapped.
func mapFile(f *os.File, size int64) *mappedFile {
	if size <= 0 || int64(int(size)) != size {
		return nil
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	return &mappedFile{data: b}
}

// release unmaps the file once nothing can reach what was found in it
// (m is the module whose tables hold names inside the mapping), or when
// m.Release is called, whichever comes first.
func (mf *mappedFile) release(m *Module) {
	mp := &mapping{data: mf.data}
	m.mappings = append(m.mappings, mp)
	runtime.AddCleanup(m, (*mapping).unmap, mp)
}

// mapping is one file mapped for a module: unmapped once.
type mapping struct {
	mu   sync.Mutex
	data []byte
}

func (mp *mapping) unmap() {
	mp.mu.Lock()
	defer mp.mu.Unlock()
	if mp.data != nil {
		_ = syscall.Munmap(mp.data)
		mp.data = nil
	}
}

// Release unmaps the module's files now, rather than when the garbage
// collector finds the module unreachable: a caller that names a few
// addresses of many modules, one after the other, holds the pages of one
// at a time. The module must not be used afterwards (its tables lie in
// the mappings); the names Symbol returned are the caller's own and stay.
// A module read from the table cache or not read at all has nothing to
// release.
func (m *Module) Release() {
	for _, mp := range m.mappings {
		mp.unmap()
	}
	m.mappings = nil
}

func (mf *mappedFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= int64(len(mf.data)) {
		return 0, io.EOF
	}
	n := copy(p, mf.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// slice returns the n bytes at off of the mapping (ok false when they are
// not all in the file).
func (mf *mappedFile) slice(off, n uint64) ([]byte, bool) {
	size := uint64(len(mf.data))
	if off > size || n > size-off {
		return nil, false
	}
	return mf.data[off : off+n : off+n], true
}

// faultsPanic makes a fault on a mapped file a panic in this goroutine
// until the returned function restores the previous setting.
func faultsPanic() func() {
	old := debug.SetPanicOnFault(true)
	return func() { debug.SetPanicOnFault(old) }
}
