// Package layers states which layer of the tree may import which (see
// docs/architecture.md); its test walks every Go package of the module and
// fails on an import that crosses the layers the wrong way.
//
//	format/      the trace format             imports internal/
//	internal/    helpers of the layers above  imports format/
//	analysis/    what post and reports compute imports format/, internal/
//	libperfutil/ the client API               imports format/, internal/
//	daemon/      the root agent                imports libperfutil/, analysis/, format/, internal/
//	tools/       the commands                  imports anything but daemon/
//
// Test files may import anything (a client test reads a report through
// the analysis layer); scripts/ and bench/ are test programs.
package layers

import "strings"

// Allowed lists, per layer (the first element of a package's path in the
// module), the layers its non-test files may import besides its own.
var Allowed = map[string][]string{
	"format":      {"internal"},
	"internal":    {"format"},
	"analysis":    {"format", "internal"},
	"libperfutil": {"format", "internal"},
	"daemon":      {"libperfutil", "analysis", "format", "internal"},
	"tools":       {"libperfutil", "analysis", "format", "internal"},
}

// Apart lists packages of one layer that must not import each other: the
// two backends of the client API meet only where a tool links both
// (libperfutil/backends) or picks one (libperfutil/itrace).
var Apart = [][2]string{
	{"libperfutil/kmodbackend", "libperfutil/daemonclient"},
}

// Layer is the layer of a package path relative to the module.
func Layer(rel string) string {
	l, _, _ := strings.Cut(rel, "/")
	return l
}

// Check says why from may not import to ("" when it may); both are paths
// relative to the module.
func Check(from, to string) string {
	lf, lt := Layer(from), Layer(to)
	allowed, ruled := Allowed[lf]
	if !ruled {
		return ""
	}
	for _, a := range Apart {
		for _, p := range [][2]string{a, {a[1], a[0]}} {
			if (from == p[0] || strings.HasPrefix(from, p[0]+"/")) && (to == p[1] || strings.HasPrefix(to, p[1]+"/")) {
				return from + " and " + to + " are kept apart: they meet in libperfutil/backends"
			}
		}
	}
	if lf == lt {
		return ""
	}
	for _, a := range allowed {
		if lt == a {
			return ""
		}
	}
	return lf + "/ may import only " + strings.Join(append([]string{lf}, allowed...), "/, ") + "/, not " + to
}
