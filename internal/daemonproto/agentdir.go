package daemonproto

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrUnsafeDir is wrapped by CheckAgentDir's refusals.
var ErrUnsafeDir = errors.New("unsafe agent directory")

// CheckAgentDir checks that only root and owner can change what dir holds:
// dir and every directory above it (checked with Lstat, symbolic links
// followed only when root or owner made them) are owned by root or owner
// and not writable by group or others, except a sticky directory (like
// /tmp) whose entry on the path is root's or owner's. The agent keeps its
// socket, state file and log in dir: a directory another user could write
// would let that user plant a state file or a symbolic link for root to
// write through.
func CheckAgentDir(dir string, owner int) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := checkPath(abs, owner, 0); err != nil {
		return err
	}
	// The directory itself is not writable by others even if sticky: a
	// user could still create the names the agent uses before it does.
	fi, err := os.Stat(abs)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s has mode %o: other users may create files there (a state file, a symbolic link for the agent to write through); use a directory only root can write, e.g. %s", ErrUnsafeDir, abs, fi.Mode().Perm(), filepath.Dir(DefaultSocket))
	}
	return nil
}

// CheckAgentPath is CheckAgentDir for a directory that may not exist yet:
// its nearest existing ancestor is checked (the agent creates the rest).
func CheckAgentPath(dir string, owner int) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	want := abs
	for {
		if _, err := os.Lstat(abs); err == nil || !errors.Is(err, os.ErrNotExist) || abs == "/" {
			if abs == want {
				return CheckAgentDir(abs, owner)
			}
			return checkPath(abs, owner, 0)
		}
		abs = filepath.Dir(abs)
	}
}

func checkPath(abs string, owner, depth int) error {
	if depth > 8 {
		return fmt.Errorf("%w: %s: too many levels of symbolic links", ErrUnsafeDir, abs)
	}
	cur := "/"
	if err := checkDirEntry(cur, owner); err != nil {
		return err
	}
	for _, name := range strings.Split(strings.Trim(abs, "/"), "/") {
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			// The link's directory (cur) was checked; the link itself must be
			// trusted's, then its target is checked in full.
			if err := ownedBy(next, fi, owner); err != nil {
				return err
			}
			target, err := os.Readlink(next)
			if err != nil {
				return err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			if err := checkPath(filepath.Clean(target), owner, depth+1); err != nil {
				return err
			}
			if cur, err = filepath.EvalSymlinks(next); err != nil {
				return err
			}
			continue
		}
		if err := checkDirEntry(next, owner); err != nil {
			return err
		}
		cur = next
	}
	return nil
}

// checkDirEntry: path is a directory owned by root or owner, not writable
// by group or others unless sticky.
func checkDirEntry(path string, owner int) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafeDir, path)
	}
	if err := ownedBy(path, fi, owner); err != nil {
		return err
	}
	if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("%w: %s has mode %o: other users may create files there (a state file, a symbolic link for the agent to write through); use a directory only root can write, e.g. %s", ErrUnsafeDir, path, fi.Mode().Perm(), filepath.Dir(DefaultSocket))
	}
	return nil
}

func ownedBy(path string, fi os.FileInfo, owner int) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: cannot tell who owns %s", ErrUnsafeDir, path)
	}
	if st.Uid != 0 && int(st.Uid) != owner {
		return fmt.Errorf("%w: %s belongs to uid %d: another user could replace what the agent keeps there; use a directory only root can write, e.g. %s", ErrUnsafeDir, path, st.Uid, filepath.Dir(DefaultSocket))
	}
	return nil
}

// OpenAgentFile opens a file the agent keeps (its log, its state file) in
// a directory CheckAgentDir accepted: never through a symbolic link
// (O_NOFOLLOW), never anything but a regular file, and only one owned by
// root or owner. flag is os.OpenFile's; perm applies when it is created.
func OpenAgentFile(path string, flag int, perm os.FileMode, owner int) (*os.File, error) {
	fd, err := unix.Open(path, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, uint32(perm))
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link: the agent never writes through links", ErrUnsafeDir, path)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrUnsafeDir, path)
	}
	if st.Uid != 0 && int(st.Uid) != owner {
		f.Close()
		return nil, fmt.Errorf("%w: %s belongs to uid %d, not to the agent", ErrUnsafeDir, path, st.Uid)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFL, unix.O_APPEND&flag); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadState reads the state file of the agent on socket: only a regular
// file owned by root or owner in a directory CheckAgentDir accepts; any
// other (planted by another user) is ignored (nil).
func ReadState(socket string, owner int) *State {
	if CheckAgentDir(filepath.Dir(socket), owner) != nil {
		return nil
	}
	f, err := OpenAgentFile(StatePath(socket), os.O_RDONLY, 0, owner)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	var st State
	if err := json.Unmarshal(b[:n], &st); err != nil || st.PID <= 0 {
		return nil
	}
	return &st
}

// WriteState replaces the state file of the agent on socket: the
// temporary file is created anew (O_EXCL, O_NOFOLLOW) and renamed over it.
func WriteState(socket string, st *State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	p := StatePath(socket)
	tmp := p + ".tmp"
	_ = os.Remove(tmp) // a leftover of a crash (the directory is the agent's own)
	fd, err := unix.Open(tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return &os.PathError{Op: "create", Path: tmp, Err: err}
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.Write(b)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(tmp)
		return werr
	}
	return os.Rename(tmp, p)
}
