// Package outdir creates a user's report files safely: in a directory
// that is the user's own and closed to others (or that it creates, 0700),
// by name relative to that directory once opened, never through a
// symbolic link, mode 0600. A directory another user can write is one
// where they can plant a link named like a report, and have the report
// written through it into a file of the victim's.
package outdir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FileMode is the mode of the files created here (call flows, like
// traces, show what a program did and where its code lies).
const FileMode = 0o600

// Dir is an opened output directory.
type Dir struct {
	Path string
	fd   int
}

// Open opens the output directory path, creating it (0700, its missing
// parents 0755) if it does not exist, and checks it belongs to the
// effective user and is not writable by group or others.
func Open(path string) (*Dir, error) {
	if parent := filepath.Dir(path); parent != path {
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return nil, fmt.Errorf("creating %s: %w", parent, err)
		}
	}
	if err := unix.Mkdir(path, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the directory %s: %w", path, err)
	}
	if err := check(path, fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Dir{Path: path, fd: fd}, nil
}

func check(path string, fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return fmt.Errorf("%s belongs to uid %d, not to you (uid %d): give a directory of your own", path, st.Uid, euid)
	}
	if st.Mode&0o022 != 0 {
		who := "its group"
		if st.Mode&0o002 != 0 {
			who = "others"
		}
		return fmt.Errorf("%s is writable by %s (mode %03o): others could plant links there; chmod go-w it or give a new directory", path, who, st.Mode&0o7777)
	}
	return nil
}

// Create creates the file name in the directory, mode 0600, for writing:
// a file of that name is replaced (removed, then created exclusively; in
// a directory closed to others nobody can plant it again in between),
// and a symbolic link is never followed.
func (d *Dir) Create(name string) (*os.File, error) {
	if name != filepath.Base(name) || name == "." || name == ".." {
		return nil, fmt.Errorf("%q is not a file name", name)
	}
	path := filepath.Join(d.Path, name)
	if err := unix.Unlinkat(d.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("replacing %s: %w", path, err)
	}
	fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, FileMode)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Close releases the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// CreateFile creates or truncates the file at path for writing: a new
// file is 0600; an existing one must be a regular file of the effective
// user's (a symbolic link at the last component is not followed, a FIFO
// is refused, not waited on).
func CreateFile(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, FileMode)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: give the path of a regular file (reports are never written through links)", path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "create", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	switch {
	case err != nil:
		err = fmt.Errorf("%s: %w", path, err)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = fmt.Errorf("%s is not a regular file", path)
	case int(st.Uid) != os.Geteuid():
		err = fmt.Errorf("%s belongs to uid %d, not to you (uid %d): remove it or give another path", path, st.Uid, os.Geteuid())
	default:
		if err = f.Truncate(0); err == nil {
			_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, 0)
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", path, err)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
