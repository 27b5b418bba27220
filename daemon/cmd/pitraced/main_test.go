package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"perfinsp/internal/daemonproto"
)

// TestSIGTERMRemovesStateFile: pitraced stopped with SIGTERM (systemctl
// stop, kill) exits cleanly: its socket and state file are gone, so the
// next client does not report a daemon that "ended without shutting
// down". (The files were removed after Serve returned, and the process
// exited first: left behind on every SIGTERM.)
func TestSIGTERMRemovesStateFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("pitraced runs as root (its --user mode picks its own socket): run as root")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "pitraced")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for i := 0; i < 5; i++ {
		sock := filepath.Join(dir, "s")
		cmd := exec.Command(bin, "--socket", sock, "--quiet")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if _, err := os.Stat(daemonproto.StatePath(sock)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				t.Fatal("pitraced did not write its state file within 10 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("pitraced after SIGTERM: %v", err)
		}
		for _, p := range []string{sock, daemonproto.StatePath(sock)} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Fatalf("run %d: %s still there after a clean SIGTERM exit (%v)", i, p, err)
			}
		}
	}
}
