package uprobe

import (
	"os"
	"sync/atomic"
	"testing"

	"perfinsp/internal/testenv"
)

// The tests keep HOME and the caches in a temporary directory of their own.
// With spinEnv set the binary is a target instead: it calls probed for ever.
func TestMain(m *testing.M) {
	if os.Getenv(spinEnv) != "" {
		for sum := 0; ; {
			sum += callProbed(1 << 20)
			spinSink.Store(int64(sum))
		}
	}
	testenv.Main(m)
}

// spinSink keeps the spinning target's calls.
var spinSink atomic.Int64
