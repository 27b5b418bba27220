package itrace

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestMaxInsnsEndsTheSession: a session with an instruction limit ends by
// itself once it traced that many instructions (within one block), says
// so, and lets the process run on untraced.
func TestMaxInsnsEndsTheSession(t *testing.T) {
	cmd := exec.Command(buildC(t, "spin", spinner))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	const max = 20000
	tr, err := Start(Options{PIDs: []int{pid}, Step: "single", MaxInsns: max}, &capture{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-tr.Done():
	case <-time.After(5 * time.Minute):
		tr.Stop()
		t.Fatal("the session did not end at its instruction limit")
	}
	st := tr.Stats()
	if !st.LimitReached || st.Instructions < max || st.Instructions > max+64 {
		t.Fatalf("limit %d: LimitReached %v after %d instructions", max, st.LimitReached, st.Instructions)
	}
	var ws syscall.WaitStatus
	if got, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); got == pid {
		t.Fatalf("the process ended when the session did: %v", ws)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("process gone after the limit: %v", err)
	}
	t.Logf("limit %d: the session ended after %d instructions, %d records", max, st.Instructions, st.Records)
}
