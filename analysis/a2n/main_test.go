package a2n

import (
	"fmt"
	"os"
	"testing"

	"perfinsp/internal/testenv"
)

// The tests keep HOME and the caches in a temporary directory of their
// own, and look for perf maps and Java stacks in an empty directory of
// their own: files other programs left in /tmp never change a report here.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "perfmaps-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	DefaultPerfMapDir = dir
	code := testenv.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}
