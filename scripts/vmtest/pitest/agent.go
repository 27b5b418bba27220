package main

import (
	"fmt"
	"net"
	"os"
	"time"

	"perfinsp/internal/daemonproto"
	"perfinsp/libperfutil/daemonclient"
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
	// gone when nothing accepts on its socket any more
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			fmt.Println("agent: stopped")
			return nil
		}
		conn.Close()
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("agent at %s still accepts 20 s after shutdown", sock)
}
