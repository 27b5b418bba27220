package main

import (
	"path/filepath"
	"strings"
	"testing"

	"perfinsp/internal/tracetest"
)

// swtrace on in wrap or cont mode names the file it streams to, which it
// starts over: the mode may have been set long before, elsewhere.
func TestOnNamesTheStreamFile(t *testing.T) {
	e := tracetest.Setup(t)
	stream := filepath.Join(t.TempDir(), "earlier.nrm2")
	e.Sw("mode", "cont", "-f", stream)
	e.Sw("init", "-t", "1M")
	out := e.Sw("on")
	e.Sw("off")
	e.Sw("get", stream)
	if !strings.Contains(out, "mode cont: streaming to "+stream) {
		t.Errorf("swtrace on in cont mode: %q; want the stream file named", out)
	}
	e.Sw("mode", "normal")
	out = e.Sw("on", "--discard")
	e.Sw("off")
	if strings.Contains(out, "streaming") {
		t.Errorf("swtrace on in normal mode: %q; want no stream file", out)
	}
}
