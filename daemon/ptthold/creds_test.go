package ptthold

import (
	"errors"
	"os"
	"testing"

	"perfinsp/internal/testenv"

	"golang.org/x/sys/unix"
)

func threadCreds() (uid, gid uintptr, caps uint64) {
	uid, _, _ = unix.RawSyscall(unix.SYS_GETUID, 0, 0, 0)
	gid, _, _ = unix.RawSyscall(unix.SYS_GETGID, 0, 0, 0)
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	_ = unix.Capget(&hdr, &data[0])
	return uid, gid, uint64(data[0].Effective) | uint64(data[1].Effective)<<32
}

// The caller's thread holds the caller's uid and gid and no capability;
// the rest of the agent keeps root's; a stopped one runs nothing.
func TestAsCallerCredentials(t *testing.T) {
	testenv.NeedRoot(t, "to take another user's credentials")
	a, err := newAsCaller(65534, 65533)
	if err != nil {
		t.Fatal(err)
	}
	var uid, gid uintptr
	var caps uint64
	if err := a.do(func() { uid, gid, caps = threadCreds() }); err != nil {
		t.Fatal(err)
	}
	if uid != 65534 || gid != 65533 || caps != 0 {
		t.Fatalf("the caller's thread: uid %d gid %d capabilities %#x, want 65534, 65533, none", uid, gid, caps)
	}
	if u, _, c := threadCreds(); u != 0 || c == 0 || os.Geteuid() != 0 {
		t.Fatalf("the agent's own thread lost root: uid %d capabilities %#x", u, c)
	}
	a.stop()
	ran := false
	if err := a.do(func() { ran = true }); !errors.Is(err, errStopped) || ran {
		t.Fatalf("a stopped caller's thread: %v, ran %v", err, ran)
	}
	if b, err := newAsCaller(0, 0); err != nil || b != nil {
		t.Fatalf("root needs no thread of its own: %v %v", b, err)
	}
}
