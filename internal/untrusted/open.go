// Package untrusted opens files whose path comes from input other users
// can write (a trace file, module paths of its records, /tmp/perf-PID.map)
// without blocking on them: a FIFO, a device or a directory is refused
// before anything is read from it.
package untrusted

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// NotRegularError is the error of Open for a path that is not a regular
// file (after following symbolic links).
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: not a regular file (%s)", e.Path, e.Kind())
}

// Kind names what the file is, for error messages: "a named pipe (FIFO)",
// "a directory", ...
func (e *NotRegularError) Kind() string { return Kind(e.Mode) }

// Kind names the kind of file a mode says, for error messages.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file (" + m.Type().String() + ")"
}

// Open opens path read-only without blocking (opening a FIFO does not wait
// for a writer) and without making a terminal the controlling one, and
// checks with fstat that it is a regular file; otherwise it closes it and
// returns a *NotRegularError. Errors of open and fstat are returned as
// they are (*fs.PathError).
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &NotRegularError{Path: path, Mode: fi.Mode()}
	}
	return f, fi, nil
}
