package control

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// TraceFileMode is the mode of every trace file perfinsp creates: a trace
// holds the kernel's symbol addresses and every traced process's command
// line and mappings, so only its owner may read it.
const TraceFileMode = 0o600

// CreateTraceFile creates (or truncates) a trace file with the caller's own
// rights, mode 0600. It refuses anything but a regular file, never follows
// a symbolic link at the last component and never blocks (a FIFO is
// refused, not waited on). It is opened for reading too: the daemon copies
// a streamed trace back out of the file it was given. Tools open trace
// files only through this function and hand the descriptor to the backend.
func CreateTraceFile(path string) (*os.File, error) {
	if err := checkTarget(path); err != nil {
		return nil, err
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, TraceFileMode)
	if err != nil {
		return nil, openErr(path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if err := CheckRegular(f); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("truncate %s: %w", path, err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFL, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// CheckTraceTarget checks, without creating anything, that path could be
// created by CreateTraceFile: its directory exists and is writable by the
// caller, and an existing file there is a regular file, not a link.
func CheckTraceTarget(path string) error {
	if err := checkTarget(path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("cannot create %s: %w", path, &os.PathError{Op: "access", Path: dir, Err: err})
	}
	if _, err := os.Lstat(path); err == nil {
		if err := unix.Access(path, unix.W_OK); err != nil {
			return fmt.Errorf("cannot write %s: %w", path, err)
		}
	}
	return nil
}

func checkTarget(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode()&os.ModeSymlink != 0:
		return Errorf(ErrBadFile, "%s is a symbolic link: give the path of a regular file (trace files are never written through links)", path)
	case !fi.Mode().IsRegular():
		return Errorf(ErrBadFile, "%s is not a regular file (%s): trace files are written only to regular files", path, fi.Mode().Type())
	}
	return nil
}

func openErr(path string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		return Errorf(ErrBadFile, "%s is a symbolic link: give the path of a regular file (trace files are never written through links)", path)
	}
	if errors.Is(err, unix.ENXIO) {
		return Errorf(ErrBadFile, "%s is not a regular file: trace files are written only to regular files", path)
	}
	return &os.PathError{Op: "open", Path: path, Err: err}
}

// CheckRegular refuses a descriptor that is not a regular file. The daemon
// checks every descriptor a client passes: writing to a FIFO or a device
// could block it or do what the client could not.
func CheckRegular(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Errorf(ErrBadFile, "%s is not a regular file: trace files are written only to regular files", f.Name())
	}
	return nil
}
