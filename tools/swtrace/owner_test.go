package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"perfinsp/format/nrm2"
)

// other runs swtrace as a second member of the daemon's group (uid 65533).
func (s *secEnv) other(args ...string) (string, int) {
	s.T.Helper()
	full := append([]string{"--reuid=65533", "--regid=" + strconv.Itoa(s.gid), "--groups=" + strconv.Itoa(s.gid), s.Swtrace}, args...)
	cmd := exec.Command("setpriv", full...)
	cmd.Env = s.Environ
	cmd.Dir = s.pub
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.T.Fatal(err)
	}
	return string(out), code
}

// A member's trace, and the facility a member configured and has not used
// yet, are that member's: another member's setrate, enable, mode, init or
// on is refused, and the trace's header keeps the rate it was taken at.
func TestConfigBelongsToItsHolder(t *testing.T) {
	s := setupSec(t)
	refused := func(args ...string) {
		t.Helper()
		out, code := s.other(args...)
		if code == 0 || !strings.Contains(out, "65534") {
			t.Fatalf("the other member's swtrace %v: exit %d, want a refusal naming uid 65534:\n%s", args, code, out)
		}
	}
	// Reserved between init and on.
	s.memberOK("init", "-t", "64K", "-m", "64K")
	refused("on")
	refused("init", "-t", "64K", "-m", "64K")
	s.memberOK("setrate", "250")
	s.memberOK("on")
	s.memberOK("off")
	// A trace not written yet.
	for _, args := range [][]string{{"setrate", "50000"}, {"enable", "dispatch"}, {"disable", "tprof"}, {"mode", "wrap", "-f", "x.nrm2"}, {"init"}, {"on"}} {
		refused(args...)
	}
	s.memberOK("get", "mine.nrm2")
	out := s.memberOK("info")
	if !strings.Contains(out, "250 Hz") {
		t.Fatalf("the holder's rate was changed:\n%s", out)
	}
	b, err := os.ReadFile(filepath.Join(s.pub, "mine.nrm2"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := nrm2.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Header.RateHz != 250 {
		t.Fatalf("the trace's header says %d Hz, want the 250 it was taken at", f.Header.RateHz)
	}
	// Written: the other member may take the facility over.
	if out, code := s.other("setrate", "500"); code != 0 {
		t.Fatalf("the other member after the trace was written: exit %d\n%s", code, out)
	}
	s.mustFail("65533", "setrate", "100")
}
