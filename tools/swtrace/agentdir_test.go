package main

// The agent's own files (socket, state file, log) against another user who
// can write the directory they are in.

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfinsp/internal/daemonproto"
	"perfinsp/internal/testenv"
	"perfinsp/internal/tracetest"
)

// plantedDir returns a directory of the test (mode given, owned by uid)
// where another user plants a state file naming an attacker's group and a
// dead daemon, and links pitraced.log and the state's .tmp to a
// root-owned victim file.
func plantedDir(t *testing.T, e *tracetest.Env, sub string, mode os.FileMode, uid int) (dir, victim string) {
	testenv.OpenPathTo(t, e.Dir)
	if out, err := exec.Command("groupadd", "-f", secGroup).CombinedOutput(); err != nil {
		t.Fatalf("groupadd: %v %s", err, out)
	}
	top := filepath.Join(e.Dir, sub)
	if err := os.MkdirAll(top, 0o755); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(top, "shared")
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, mode)
	victim = filepath.Join(top, "victim")
	if err := os.WriteFile(victim, []byte("root's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "pitraced.sock")
	t.Cleanup(func() { killDaemonsOn(sock) })
	st, _ := json.Marshal(daemonproto.State{PID: 999999999, Group: secGroup, State: "on", Unsaved: true, Time: time.Now()})
	plant := map[string]func(string) error{
		daemonproto.StatePath(sock):          func(p string) error { return os.WriteFile(p, st, 0o644) },
		daemonproto.StatePath(sock) + ".tmp": func(p string) error { return os.Symlink(victim, p) },
		filepath.Join(dir, "pitraced.log"):   func(p string) error { return os.Symlink(victim, p) },
	}
	for p, fn := range plant {
		if err := fn(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(dir, uid, uid); err != nil {
		t.Fatal(err)
	}
	return dir, victim
}

func victimIntact(t *testing.T, victim string) {
	t.Helper()
	if b, err := os.ReadFile(victim); err != nil || string(b) != "root's secret\n" {
		t.Fatalf("the root-owned file was written through a planted link: %q %v", b, err)
	}
}

// A socket directory other users can write (world-writable sticky like
// /tmp, or another user's) is refused by root's swtrace and by pitraced:
// nothing is started, nothing written through the planted links, and the
// planted state's group is never used.
func TestAgentDirWritableByOthersRefused(t *testing.T) {
	e := tracetest.Setup(t)
	for _, c := range []struct {
		name string
		mode os.FileMode
		uid  int
		want string
	}{
		{"sticky", 0o1777 | os.ModeSticky, 0, "other users may create files there"},
		{"nobody's", 0o755, nobody, "belongs to uid 65534"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, victim := plantedDir(t, e, c.name, c.mode, c.uid)
			sock := filepath.Join(dir, "pitraced.sock")
			env := append(append([]string(nil), e.Environ...), daemonproto.EnvSocket+"="+sock)
			cmd := exec.Command(e.Swtrace, "info")
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), c.want) {
				t.Fatalf("swtrace info with its socket in a %s directory: %v\n%s", c.name, err, out)
			}
			d := exec.Command(filepath.Join(e.Bin, "pitraced"), "--socket", sock)
			d.Env = env
			out, err = d.CombinedOutput()
			if err == nil || !strings.Contains(string(out), c.want) {
				t.Fatalf("pitraced on a %s directory: %v\n%s", c.name, err, out)
			}
			if _, err := os.Lstat(sock); err == nil {
				t.Fatal("a socket was created there")
			}
			victimIntact(t, victim)
		})
	}
}

// In the agent's own directory a state file root did not write is ignored
// (no group from it, no death notice), and a link for the log is refused.
func TestPlantedStateIgnored(t *testing.T) {
	e := tracetest.Setup(t)
	dir, victim := plantedDir(t, e, "own", 0o755, 0)
	sock := filepath.Join(dir, "pitraced.sock")
	env := append(append([]string(nil), e.Environ...), daemonproto.EnvSocket+"="+sock)
	run := func() (string, error) {
		cmd := exec.Command(e.Swtrace, "info")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run()
	if err == nil || !strings.Contains(out, "symbolic link") {
		t.Fatalf("swtrace with pitraced.log a link: %v\n%s", err, out)
	}
	victimIntact(t, victim)
	if err := os.Remove(filepath.Join(dir, "pitraced.log")); err != nil {
		t.Fatal(err)
	}
	out, err = run()
	t.Cleanup(func() {
		cmd := exec.Command(e.Swtrace, "free")
		cmd.Env = env
		_ = cmd.Run()
		if st := daemonproto.ReadState(sock, 0); st != nil {
			_ = syscall.Kill(st.PID, syscall.SIGTERM)
		}
	})
	if err != nil {
		t.Fatalf("swtrace info: %v\n%s", err, out)
	}
	if strings.Contains(out, "ended without shutting down") || strings.Contains(out, secGroup) {
		t.Fatalf("the planted state file was believed:\n%s", out)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("the daemon's socket has mode %o: a group came from the planted state", fi.Mode().Perm())
	}
	b, _ := os.ReadFile(daemonproto.StatePath(sock))
	if bytes.Contains(b, []byte(secGroup)) {
		t.Fatalf("state file: %s", b)
	}
	victimIntact(t, victim)
}

// killDaemonsOn stops the daemons serving sock (this test's own path),
// whatever they were started with.
func killDaemonsOn(sock string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if bytes.Contains(b, []byte("pitraced\x00")) && bytes.Contains(b, []byte("\x00"+sock+"\x00")) {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
	}
}
