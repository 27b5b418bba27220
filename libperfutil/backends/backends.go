// Package backends links every trace facility backend into a tool. Tools
// import it for its side effect and then call control.Open. It also joins
// the two: the module backend's wrap and cont buffers are drained by the
// agent, reached through the daemon client.
package backends

import (
	"fmt"
	"os"

	// The daemon backend (pitraced).
	"perfinsp/libperfutil/daemonclient"
	// The kernel module backend (/dev/pitrace).
	"perfinsp/libperfutil/kmodbackend"
)

func init() { kmodbackend.SetDrainAgent(drainByAgent) }

// drainByAgent passes the module descriptor and the stream file over the
// agent's socket (OpDrain); the agent attaches as the drainer before it
// answers.
func drainByAgent(dev, stream *os.File) error {
	agent, err := daemonclient.DialAgent()
	if err != nil {
		return fmt.Errorf("wrap and cont modes need the agent (pitraced) to drain the buffers: %w", err)
	}
	defer agent.Close()
	if err := agent.Call(kmodbackend.OpDrain, nil, nil, dev, stream); err != nil {
		return fmt.Errorf("the agent could not start draining: %w", err)
	}
	return nil
}
