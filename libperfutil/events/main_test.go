package events

import (
	"os"
	"testing"

	"perfinsp/internal/testenv"
)

// The tests keep HOME and the caches in a temporary directory of their own.
// Started with measureHelperEnv set, the test binary is measureHelper.
func TestMain(m *testing.M) {
	if os.Getenv(measureHelperEnv) != "" {
		os.Exit(measureHelper())
	}
	testenv.Main(m)
}
