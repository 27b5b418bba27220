// Package daemonclient is the trace facility backend served by the pitraced
// daemon over its Unix control socket.
package daemonclient
