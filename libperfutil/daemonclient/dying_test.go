package daemonclient

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"perfinsp/internal/daemonproto"
)

// A daemon that dies while a client pings it (its socket accepted the
// connection, then closed with it: a killed daemon's last thread still
// held the socket) is a daemon found dead: the client reports its death
// and starts its successor, rather than failing with the reset.
func TestDialDaemonDyingAsWeConnect(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting a successor is root's (the test's stand-in is never run otherwise)")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "pitraced.sock")
	t.Setenv(daemonproto.EnvSocket, path)
	// the dead daemon's state: a process that has exited
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if err := daemonproto.WriteState(path, &daemonproto.State{PID: gone.Process.Pid, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	// the dying daemon: takes the ping, then its socket and the
	// connection close
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = bufio.NewReader(c).ReadString('\n')
		ln.Close()
		c.Close()
	}()
	var started bool
	var succ net.Listener
	defer func(f func(string, *daemonproto.State) error) { startDaemon = f }(startDaemon)
	startDaemon = func(p string, prev *daemonproto.State) error {
		started = true
		if prev == nil || prev.PID != gone.Process.Pid {
			t.Errorf("the successor was given the state %+v", prev)
		}
		succ, err = net.Listen("unix", p)
		return err
	}
	c, err := Dial()
	if succ != nil {
		defer succ.Close()
	}
	if err != nil {
		t.Fatalf("Dial with the daemon dying during the ping: %v", err)
	}
	defer c.Close()
	if !started {
		t.Fatal("no successor started")
	}
	if n := c.Notices(); len(n) != 1 || !strings.Contains(n[0], "ended without shutting down") {
		t.Errorf("notices %q: want the predecessor's death", n)
	}
}
