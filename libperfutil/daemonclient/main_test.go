package daemonclient

import (
	"testing"

	"perfinsp/internal/testenv"
)

// The tests keep HOME and the caches in a temporary directory of their own.
func TestMain(m *testing.M) { testenv.Main(m) }
