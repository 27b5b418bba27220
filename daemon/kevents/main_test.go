package kevents

import (
	"os"
	"testing"

	"perfinsp/internal/testenv"
)

// The tests keep HOME and the caches in a temporary directory of their own.
// The test binary run with pingPongEnv set is the switch-heavy program of
// TestEverySwitchOfABusyMachine (realtime_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(pingPongEnv) != "" {
		os.Exit(pingPong(os.Getenv(pingPongEnv)))
	}
	testenv.Main(m)
}
