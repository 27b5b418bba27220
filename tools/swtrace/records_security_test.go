package main

// Records written into a running trace (hooks, the JVMTI agent's JProf
// records, its binary stream) and what info shows of it, against a member
// of the daemon's --group and a plain user: only the trace's holder (or
// root) adds records to it, and only the holder (and root) sees the name
// of its stream file.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"perfinsp/format/nrm2"
	"perfinsp/format/trace"
	"perfinsp/internal/daemonproto"
)

// attackJProf writes a JIT_METHOD record named name+".records" through the
// jprof op's record form, one named name+".stream" through the stream form
// in JSON ({"cpu":N,"stream":"BASE64"}), and one named name+".frame"
// through the binary frame the agent sends (daemonproto.FrameMagic), and
// reports what the agent answered to each.
func attackJProf(name string) error {
	r, err := dialRaw()
	if err != nil {
		return err
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	now := uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
	answer := func() (string, int, error) {
		var resp daemonproto.Response
		if _, err := r.c.Receive(&resp); err != nil {
			return "", 0, err
		}
		var rep daemonproto.JProfReply
		_ = json.Unmarshal(resp.Result, &rep)
		return resp.Error, rep.Written, nil
	}
	send := func(args any) (string, int, error) {
		b, _ := json.Marshal(args)
		if err := r.c.Send(&daemonproto.Request{Op: daemonproto.OpJProf, Args: b}); err != nil {
			return "", 0, err
		}
		return answer()
	}
	recMsg, recN, err := send(daemonproto.JProfArgs{Records: []daemonproto.JProfRecord{
		{Time: now, Major: trace.MajorJITLoad, Minor: trace.JITMethod, ID: 0x7f0000001000, Name: name + ".records"}}})
	if err != nil {
		return err
	}
	stream, err := trace.Encode(nil, trace.MajorSys, trace.SysTimeHigh, trace.LayoutFixed, now, []uint64{now >> 32}, "")
	if err != nil {
		return err
	}
	if stream, err = trace.Encode(stream, trace.MajorJITLoad, trace.JITMethod, trace.LayoutString, now+1, []uint64{1, 0x7f0000002000}, name+".stream"); err != nil {
		return err
	}
	raw := json.RawMessage(`{"cpu":0,"stream":"` + base64.StdEncoding.EncodeToString(stream) + `"}`)
	strMsg, strN, err := send(raw)
	if err != nil {
		return err
	}
	frame := make([]byte, daemonproto.JProfFrameHead, 64)
	frame, err = trace.Encode(frame, trace.MajorSys, trace.SysTimeHigh, trace.LayoutFixed, now+2, []uint64{(now + 2) >> 32}, "")
	if err != nil {
		return err
	}
	if frame, err = trace.Encode(frame, trace.MajorJITLoad, trace.JITMethod, trace.LayoutString, now+2, []uint64{1, 0x7f0000003000}, name+".frame"); err != nil {
		return err
	}
	if err := r.c.SendFrame(daemonproto.OpJProf, frame); err != nil {
		return err
	}
	frMsg, frN, err := answer()
	if err != nil {
		return err
	}
	fmt.Printf("RESULT: records=%q written=%d stream=%q written=%d frame=%q written=%d\n", recMsg, recN, strMsg, strN, frMsg, frN)
	return nil
}

// userRecords lists the hook records (minor: words) and the JIT_METHOD
// names of a trace file.
func userRecords(t *testing.T, path string) (hooks map[uint32]bool, methods []string) {
	t.Helper()
	f, err := nrm2.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	hooks = map[uint32]bool{}
	_ = f.Records(func(r *trace.Record) error {
		switch {
		case r.Major == 0x100:
			hooks[r.Minor] = true
		case r.Major == trace.MajorJITLoad && r.Minor == trace.JITMethod:
			methods = append(methods, r.Str)
		}
		return nil
	})
	return hooks, methods
}

// TestRecordsOnlyIntoOwnTrace: a member's hooks and JProf records (all three
// forms) into another member's running trace are refused; the holder's
// and root's are written; a plain user does not reach the agent. Then the
// member holds a trace of its own: its JProf records are written and the
// other member's hook is refused.
func TestRecordsOnlyIntoOwnTrace(t *testing.T) {
	s := setupSec(t)
	mustOther := func(args ...string) {
		t.Helper()
		if out, code := s.other(args...); code != 0 {
			t.Fatalf("swtrace %v as the other member: exit %d\n%s", args, code, out)
		}
	}
	mustOther("init", "-t", "1M", "-m", "256K")
	mustOther("on")
	s.mustFail("belongs to uid 65533", "hook", "0x100", "3", "0xbad")
	res := s.attackRun(true, "jprof", "Attacker")
	if strings.Count(res, "belongs to uid 65533") != 3 || strings.Count(res, "written=0") != 3 {
		t.Fatalf("a member's JProf records into another member's trace: %s", res)
	}
	out, err := s.attacker(false, "jprof", "Plain").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied") {
		t.Fatalf("a plain user's JProf records: %v\n%s", err, out)
	}
	mustOther("hook", "0x100", "1", "1")
	s.Sw("hook", "0x100", "2", "2") // root may
	mustOther("off")
	theirs := filepath.Join(s.pub, "theirs.nrm2")
	mustOther("get", theirs)
	mustOther("free")
	hooks, methods := userRecords(t, theirs)
	if !hooks[1] || !hooks[2] || hooks[3] || len(methods) != 0 {
		t.Fatalf("the other member's trace: hooks %v (want minors 1 and 2, the holder's and root's), JIT methods %q (want none)", hooks, methods)
	}

	// The member's own trace: its records go in, the other member's not.
	s.memberOK("init", "-t", "1M", "-m", "256K")
	s.memberOK("on")
	res = s.attackRun(true, "jprof", "Holder")
	if res != `records="" written=1 stream="" written=1 frame="" written=1` {
		t.Fatalf("the holder's JProf records into its own trace: %s", res)
	}
	if out, code := s.other("hook", "0x100", "4", "4"); code == 0 || !strings.Contains(out, "belongs to uid 65534") {
		t.Fatalf("the other member's hook into the member's trace: exit %d\n%s", code, out)
	}
	s.memberOK("off")
	s.memberOK("get", "mine.nrm2")
	hooks, methods = userRecords(t, filepath.Join(s.pub, "mine.nrm2"))
	if hooks[4] || strings.Join(methods, ",") != "Holder.records,Holder.stream,Holder.frame" {
		t.Fatalf("the member's trace: hooks %v (want none of the other member's), JIT methods %q (want its own three)", hooks, methods)
	}
}

// TestInfoHidesOthersStreamFile: the name of a member's stream file (a
// path of theirs) is shown by info to that member and to root, not to
// another member; the next user to hold the facility is told to name a
// file of their own.
func TestInfoHidesOthersStreamFile(t *testing.T) {
	s := setupSec(t)
	dir := filepath.Join(s.pub, "project-x")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65533, s.gid); err != nil {
		t.Fatal(err)
	}
	stream := filepath.Join(dir, "stream.nrm2")
	for _, args := range [][]string{{"mode", "cont", "-f", stream}, {"init", "-t", "256K", "-m", "256K"}, {"on"}} {
		if out, code := s.other(args...); code != 0 {
			t.Fatalf("swtrace %v as the other member: exit %d\n%s", args, code, out)
		}
	}
	if out, _ := s.other("info"); !strings.Contains(out, stream) {
		t.Fatalf("the holder's info does not name its stream file:\n%s", out)
	}
	if out := s.Sw("info"); !strings.Contains(out, stream) {
		t.Fatalf("root's info does not name the stream file:\n%s", out)
	}
	out := s.memberOK("info")
	if strings.Contains(out, "project-x") {
		t.Fatalf("another member's info names the holder's stream file:\n%s", out)
	}
	if !strings.Contains(out, "65533") {
		t.Fatalf("another member's info does not say who holds the trace:\n%s", out)
	}
	for _, args := range [][]string{{"off"}, {"get", stream}, {"free"}} {
		if out, code := s.other(args...); code != 0 {
			t.Fatalf("swtrace %v as the other member: exit %d\n%s", args, code, out)
		}
	}
	// The next user to hold the facility names a stream file of their own.
	s.mustFail("swtrace mode cont -f FILE", "on")
	s.memberOK("mode", "cont", "-f", "mine.nrm2")
	s.memberOK("on")
	if out := s.memberOK("info"); !strings.Contains(out, filepath.Join(s.pub, "mine.nrm2")) {
		t.Fatalf("the member's info does not name its own stream file:\n%s", out)
	}
	s.memberOK("off")
}
