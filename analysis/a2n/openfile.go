package a2n

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"perfinsp/internal/untrusted"
)

// Every file A2N opens is named by the trace or by a convention other
// users can write into (/tmp/perf-PID.map, module paths of MTE records,
// build-id debug files), so each is opened without blocking (a FIFO must
// not hang post), checked to be a regular file of bounded size before
// anything is read (a symlink to /dev/zero must not grow memory), and, for
// perf maps and jitdumps, owned by the user running post or by root — the
// rule perf applies to perf maps.

// Size caps of the files A2N reads; variables so tests can lower them.
var (
	MaxPerfMapSize int64 = 256 << 20 // perf-PID.map text
	MaxJitdumpSize int64 = 1 << 30   // jit-PID.dump (holds the code bytes too)
	MaxModuleSize  int64 = 4 << 30   // an ELF module or debug file (read lazily)
	MaxDebugData   int64 = 64 << 20  // decompressed .gnu_debugdata (a symbol table only)
)

// openChecked opens path read-only without blocking and checks it is a
// regular file no larger than maxSize and, if ownerRule, owned by the
// effective user or by root. The error says which rule the file broke.
func openChecked(path string, maxSize int64, ownerRule bool) (*os.File, int64, error) {
	f, fi, err := untrusted.Open(path)
	if _, ok := err.(*untrusted.NotRegularError); ok {
		return nil, 0, fmt.Errorf("%w, ignored", err)
	}
	if err != nil {
		return nil, 0, err
	}
	if fi.Size() > maxSize {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %d bytes, larger than the %d-byte limit, ignored", path, fi.Size(), maxSize)
	}
	if ownerRule {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
			f.Close()
			return nil, 0, fmt.Errorf("%s: owned by uid %d, neither root nor the user running post (uid %d), ignored", path, st.Uid, os.Geteuid())
		}
	}
	return f, fi.Size(), nil
}

// readChecked reads a whole file that openChecked accepts. The read is
// bounded by the size fstat gave (a file growing meanwhile is cut there).
func readChecked(path string, maxSize int64, ownerRule bool) ([]byte, error) {
	f, size, err := openChecked(path, maxSize, ownerRule)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, size)
	n, err := io.ReadFull(f, b)
	if err != nil && err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b[:n], nil
}
