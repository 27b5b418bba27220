// Package backends links every trace facility backend into a tool. Tools
// import it for its side effect and then call control.Open.
package backends

import (
	// The daemon backend (pitraced).
	_ "perfinsp/libperfutil/daemonclient"
	// The kernel module backend (/dev/pitrace).
	_ "perfinsp/libperfutil/kmodbackend"
)
