package control

import (
	"strings"
	"testing"
)

// TestChooseBackend: the one vocabulary, the environment's say when no
// name is given, the former name, and a one-line error for anything else.
func TestChooseBackend(t *testing.T) {
	for _, c := range []struct{ name, env, want string }{
		{"", "", BackendAuto},
		{"auto", "", BackendAuto},
		{"", "kmod", BackendKmod},
		{"auto", "daemon", BackendDaemon},
		{"kmod", "daemon", BackendKmod},
		{"", "perf", BackendDaemon},
		{"daemon", "", BackendDaemon},
	} {
		t.Setenv(EnvBackend, c.env)
		got, err := ChooseBackend(c.name)
		if err != nil || got != c.want {
			t.Errorf("ChooseBackend(%q) with %s=%q = %q, %v; want %q", c.name, EnvBackend, c.env, got, err, c.want)
		}
	}
	t.Setenv(EnvBackend, "module")
	if _, err := ChooseBackend(""); err == nil || !strings.Contains(err.Error(), "kmod, daemon or auto") || strings.Contains(err.Error(), "\n") {
		t.Errorf("unknown backend: %v", err)
	}
}
