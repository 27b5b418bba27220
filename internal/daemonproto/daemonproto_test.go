package daemonproto

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The per-user agent directory: a planted one (another owner, open mode, a
// link) is refused, never used or chmod-ed.
func TestUserSocketDirIsChecked(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("XDG_RUNTIME_DIR", "")
	p, err := UserSocketPath()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(p)
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("agent dir %s: %v %v", dir, fi.Mode(), err)
	}
	// open mode: refused and left as it is
	os.Chmod(dir, 0o777)
	if _, err := UserSocketPath(); err == nil || !strings.Contains(err.Error(), "mode 777") {
		t.Fatalf("a 0777 directory was used: %v", err)
	}
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o777 {
		t.Fatal("the directory's mode was changed")
	}
	os.Remove(dir)
	// a link planted in its place
	other := t.TempDir()
	if err := os.Symlink(other, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := UserSocketPath(); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("a symbolic link was used: %v", err)
	}
	os.Remove(dir)
	// another owner
	if os.Geteuid() == 0 {
		os.Mkdir(dir, 0o700)
		os.Chown(dir, 65534, 65534)
		if _, err := UserSocketPath(); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Fatalf("another user's directory was used: %v", err)
		}
	}
}

// Oversized lines are cut off without being buffered, and files travel
// with their line.
func TestConnLimitsAndFiles(t *testing.T) {
	a, b, err := pair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	f, err := os.CreateTemp(t.TempDir(), "f")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("payload")
	if err := a.Send(&Request{Op: "get"}, f); err != nil {
		t.Fatal(err)
	}
	var req Request
	files, err := b.Receive(&req)
	if err != nil || req.Op != "get" || len(files) != 1 {
		t.Fatalf("receive: %v %+v %d files", err, req, len(files))
	}
	buf := make([]byte, 7)
	if _, err := files[0].ReadAt(buf, 0); err != nil || string(buf) != "payload" {
		t.Fatalf("the passed file reads %q (%v)", buf, err)
	}
	files[0].Close()
	go func() {
		big := make([]byte, 256<<10)
		for i := range big {
			big[i] = 'x'
		}
		for i := 0; i < 8; i++ {
			if _, err := a.c.Write(big); err != nil {
				return
			}
		}
	}()
	_ = b.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := b.Receive(&req); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a 2 MB line: %v, want ErrTooLarge", err)
	}
	if cap(b.buf) > 2*MaxRequest {
		t.Fatalf("buffered %d bytes", cap(b.buf))
	}
}

// A response larger than any request (a dump of thousands of threads)
// reaches a reader whose MaxLine is MaxResponse; a reader with the
// request bound refuses it.
func TestLargeResponse(t *testing.T) {
	big := Response{OK: true, Error: strings.Repeat("x", 3*MaxRequest)}
	for _, c := range []struct {
		max  int
		want bool
	}{{MaxResponse, true}, {0, false}} {
		a, b, err := pair()
		if err != nil {
			t.Fatal(err)
		}
		b.MaxLine = c.max
		sent := make(chan error, 1)
		go func() { sent <- a.Send(&big) }()
		_ = b.SetDeadline(time.Now().Add(30 * time.Second))
		var got Response
		_, err = b.Receive(&got)
		b.Close()
		serr := <-sent
		a.Close()
		if c.want && (err != nil || serr != nil || got.Error != big.Error) {
			t.Fatalf("MaxLine %d: receive %v, send %v, %d bytes", c.max, err, serr, len(got.Error))
		}
		if !c.want && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("MaxLine %d: a %d-byte line gave %v, want ErrTooLarge", c.max, len(big.Error), err)
		}
	}
	if err := (&Conn{}).Send(&Response{Error: strings.Repeat("x", MaxResponse)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("sending more than MaxResponse: %v", err)
	}
}

func pair() (*Conn, *Conn, error) {
	dir, err := os.MkdirTemp("", "proto")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(dir)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "s"), Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	c, err := net.DialUnix("unix", nil, ln.Addr().(*net.UnixAddr))
	if err != nil {
		return nil, nil, err
	}
	s, err := ln.AcceptUnix()
	if err != nil {
		return nil, nil, err
	}
	return NewConn(c), NewConn(s), nil
}
