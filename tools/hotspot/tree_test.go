package main

import (
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestDescendants: a shell's background child and grandchild are found by
// both ways of listing a tree (the kernel's children lists and the scan of
// every process's parent), parents first; the tree's CPU time reads.
func TestDescendants(t *testing.T) {
	sh := exec.Command("sh", "-c", "sh -c 'sleep 30 & wait' & wait")
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, p := range descendants(sh.Process.Pid)[1:] {
			_ = exec.Command("kill", "-9", strconv.Itoa(p)).Run()
		}
		_ = sh.Process.Kill()
		_ = sh.Wait()
	}()
	deadline := time.Now().Add(10 * time.Second)
	var got []int
	for len(got) < 3 && time.Now().Before(deadline) {
		got = descendants(sh.Process.Pid)
		time.Sleep(10 * time.Millisecond) // polling for the children to appear
	}
	if len(got) != 3 || got[0] != sh.Process.Pid {
		t.Fatalf("descendants %v: want the shell, its child shell and sleep", got)
	}
	scan := descendantsByScan(sh.Process.Pid)
	if !slices.Equal(scan, got) {
		t.Errorf("by scan %v, by children lists %v: want the same tree", scan, got)
	}
	if _, ok := (&procTree{root: sh.Process.Pid}).cpuNs(); !ok {
		t.Error("the tree's CPU time does not read")
	}
}
