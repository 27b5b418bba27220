package main

import "perfinsp/daemon/server"

// registerExtensions adds the ops of other daemon services (PTT, ...) to the
// control socket. Each service registers its ops here.
func registerExtensions(s *server.Server) {
	registerITrace(s)
}
