package main

import (
	"fmt"
	"os"
	"time"

	"perfinsp/libperfutil/daemonclient"
	"perfinsp/libperfutil/daemonproto"
)

// agentStop shuts down the system agent (pitraced) that earlier steps
// started on demand (the wrap/cont drainer), so that timing checks after
// it run without its background work on the CPUs; it waits until the
// socket is gone. No agent running is fine.
func agentStop() error {
	sock := daemonproto.SocketPath()
	if _, err := os.Stat(sock); err != nil {
		fmt.Println("agent: no agent running")
		return nil
	}
	c, err := daemonclient.Dial()
	if err != nil {
		return fmt.Errorf("agent at %s: %w", sock, err)
	}
	defer c.Close()
	if err := c.Shutdown(); err != nil {
		return fmt.Errorf("agent shutdown: %w", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(sock); os.IsNotExist(err) {
			fmt.Println("agent: stopped")
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("agent at %s still there 20 s after shutdown", sock)
}
