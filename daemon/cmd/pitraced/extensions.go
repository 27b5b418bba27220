package main

import (
	"perfinsp/daemon/ptthold"
	"perfinsp/daemon/server"
)

// registerExtensions adds the ops of the services the agent hosts to the
// control socket (the module's stream drainer, the PTT holder, ...). Each
// service registers its ops here.
func registerExtensions(s *server.Server, logf func(string, ...any)) {
	registerDrain(s, logf)
	ptthold.Register(s, logf)
	registerITrace(s, logf)
	registerJProf(s, logf)
}
