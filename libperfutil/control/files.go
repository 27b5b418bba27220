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
// rights, mode 0600. An existing file must belong to the caller (one another
// user created, e.g. in a shared directory, is refused: its owner could read
// the trace) and is made 0600. It refuses anything but a regular file on an
// ordinary file system (CheckRegular), never follows
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
	if err := ownPrivate(f); err != nil {
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

// ownPrivate refuses a file the caller does not own and takes group and
// other access (and set-id bits) away from one it does.
func ownPrivate(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return Errorf(ErrBadFile, "%s belongs to uid %d, not to you (uid %d): its owner could read the trace; remove it or choose another name", f.Name(), st.Uid, uid)
	}
	if st.Mode&0o7777 != TraceFileMode {
		if err := unix.Fchmod(int(f.Fd()), TraceFileMode); err != nil {
			return fmt.Errorf("chmod 600 %s: %w", f.Name(), err)
		}
	}
	return nil
}

// pseudoFS names the kernel's own file systems, where a write is a command
// to the kernel (a sysctl, a cgroup limit, a process's oom_score_adj, an
// EFI variable) checked against the writer's privileges, not a trace
// file's data; and FUSE, whose user-space server could stall the writer.
var pseudoFS = map[int64]string{
	unix.PROC_SUPER_MAGIC: "proc", unix.SYSFS_MAGIC: "sysfs", unix.CGROUP_SUPER_MAGIC: "cgroup",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2", unix.DEBUGFS_MAGIC: "debugfs", unix.TRACEFS_MAGIC: "tracefs",
	unix.SECURITYFS_MAGIC: "securityfs", unix.SELINUX_MAGIC: "selinuxfs", unix.SMACK_MAGIC: "smackfs",
	0x62656570 /* CONFIGFS_MAGIC */ : "configfs", unix.EFIVARFS_MAGIC: "efivarfs", unix.PSTOREFS_MAGIC: "pstore",
	unix.BPF_FS_MAGIC: "bpf", unix.BINFMTFS_MAGIC: "binfmt_misc", unix.DEVPTS_SUPER_MAGIC: "devpts",
	0x19800202 /* MQUEUE_MAGIC */ : "mqueue", unix.NSFS_MAGIC: "nsfs", unix.PID_FS_MAGIC: "pidfs",
	0x65735543 /* FUSE_CTL_SUPER_MAGIC */ : "fusectl", unix.FUSE_SUPER_MAGIC: "fuse",
	unix.RDTGROUP_SUPER_MAGIC: "resctrl", unix.HUGETLBFS_MAGIC: "hugetlbfs", unix.OPENPROM_SUPER_MAGIC: "openpromfs",
	unix.USBDEVICE_SUPER_MAGIC: "usbfs", unix.XENFS_SUPER_MAGIC: "xenfs", unix.BINDERFS_SUPER_MAGIC: "binderfs",
	unix.AAFS_MAGIC: "apparmorfs", unix.ANON_INODE_FS_MAGIC: "anon_inodefs", unix.SOCKFS_MAGIC: "sockfs",
	unix.PIPEFS_MAGIC: "pipefs", unix.DEVMEM_MAGIC: "devmem", unix.AUTOFS_SUPER_MAGIC: "autofs",
}

// CheckFileSystem refuses a descriptor on a kernel pseudo file system
// (pseudoFS): trace files are written only on ordinary file systems.
func CheckFileSystem(f *os.File) error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return fmt.Errorf("statfs %s: %w", f.Name(), err)
	}
	if name, bad := pseudoFS[int64(sfs.Type)]; bad {
		return Errorf(ErrBadFile, "%s is on %s, not an ordinary file system: trace files are written only to a disk or tmpfs (a write there would be a command to the kernel)", f.Name(), name)
	}
	return nil
}

// CheckRegular refuses a descriptor that is not a regular file on an
// ordinary file system (CheckFileSystem). The daemon checks every
// descriptor a client passes: writing to a FIFO or a device could block it,
// and writing as root to /proc or /sys would do what the client could not.
func CheckRegular(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return Errorf(ErrBadFile, "%s is not a regular file: trace files are written only to regular files", f.Name())
	}
	return CheckFileSystem(f)
}
