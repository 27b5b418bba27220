package main

import "testing"

// A process between giving its memory back and becoming a zombie (no
// mappings, state still R or D) has PF_EXITING in its stat flags: it
// counts as ended, not as a process without readable mappings.
func TestExitingFlag(t *testing.T) {
	for _, c := range []struct {
		fields string
		want   bool
	}{
		{"R 1 1 1 0 -1 4194308 0 0", true},  // PF_EXITING | PF_FORKNOEXEC-like bits
		{"S 1 1 1 0 -1 4194304 0 0", false}, // no PF_EXITING
		{"R 1 1", false},                    // too short
	} {
		if got := exiting([]byte(c.fields)); got != c.want {
			t.Errorf("exiting(%q) = %v, want %v", c.fields, got, c.want)
		}
	}
}
