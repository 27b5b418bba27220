package main

import (
	"errors"
	"os/exec"
	"testing"

	"perfinsp/analysis/a2n"
)

// A process reaped before its mappings are read has exited, as a zombie
// has (the command was quicker than the sampling), not failed the read.
func TestMappingsOfAReapedProcess(t *testing.T) {
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	_, err := newProcMap(c.Process.Pid, &a2n.Cache{})
	if !errors.Is(err, errExited) {
		t.Fatalf("the mappings of a reaped process (pid %d): %v, want errExited", c.Process.Pid, err)
	}
}
