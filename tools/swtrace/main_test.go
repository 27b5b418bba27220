package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"perfinsp/format/trace"
	"perfinsp/libperfutil/control"
)

func TestReorder(t *testing.T) {
	cases := map[string]string{
		"swtrace mode cont -f big.nrm2":         "swtrace mode -f big.nrm2 cont",
		"swtrace --backend daemon on --discard": "swtrace --backend daemon on --discard",
		"swtrace setrate 99 -e cycles":          "swtrace setrate -e cycles 99",
		"swtrace init -t 8M -m 1M":              "swtrace init -t 8M -m 1M",
		"swtrace hook 0x100 1 2 -s hi":          "swtrace hook -s hi 0x100 1 2",
		"swtrace hook -s hi 0x100 -- -5":        "swtrace hook -s hi -- 0x100 -5",
	}
	for in, want := range cases {
		if got := strings.Join(reorder(strings.Fields(in)), " "); got != want {
			t.Errorf("%q -> %q, want %q", in, got, want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"8M": 8 << 20, "512k": 512 << 10, "1G": 1 << 30, "4096": 4096} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("%s: %d %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "M", "-1M", "lots", "0"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestUsageErrorsNeedNoBackend(t *testing.T) {
	// These fail before any backend is contacted, with a message and exit 2.
	for _, args := range [][]string{
		{"swtrace", "init", "-t", "lots"},
		{"swtrace", "mode", "sideways"},
		{"swtrace", "setrate", "fast"},
		{"swtrace", "enable", "nonsense"},
		{"swtrace", "hook", "0x10", "1"},
	} {
		var out, errb bytes.Buffer
		code := run(args, &out, &errb)
		if code == 0 || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}

func TestAboveIdle(t *testing.T) {
	var out, errb bytes.Buffer
	var done atomic.Bool
	go func() {
		// Keep one CPU busy so the report has something to show.
		for !done.Load() {
		}
	}()
	code := run([]string{"swtrace", "aboveidle", "-i", "0.5", "-n", "1"}, &out, &errb)
	done.Store(true)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 3 || !strings.Contains(lines[0], "BUSY%") || !strings.HasPrefix(strings.TrimSpace(lines[1]), "all") {
		t.Fatalf("report:\n%s", out.String())
	}
	var maxBusy float64
	for _, l := range lines[2:] {
		f := strings.Fields(l)
		if len(f) != 4 {
			t.Fatalf("row %q", l)
		}
		var busy, idle, intr float64
		fmt.Sscan(f[1], &busy)
		fmt.Sscan(f[2], &idle)
		fmt.Sscan(f[3], &intr)
		if sum := busy + idle + intr; sum < 99.5 || sum > 100.5 {
			t.Fatalf("row %q adds to %.1f", l, sum)
		}
		if busy > maxBusy {
			maxBusy = busy
		}
	}
	if maxBusy < 50 {
		t.Fatalf("a spinning goroutine should make one CPU mostly busy; max busy %.1f%%\n%s", maxBusy, out.String())
	}
}

// A usage error is one line naming the command and pointing to --help; an
// unknown command or option names the nearest one.
func TestUsageErrorsOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"swtrace", "itrace", "on"}, "swtrace itrace on: say what to trace: -p PID, a pid list, or --pids-from N (swtrace itrace on --help for more)\n"},
		{[]string{"swtrace", "enabel", "tprof"}, "swtrace: unknown command \"enabel\": did you mean enable? (swtrace --help for more)\n"},
		{[]string{"swtrace", "enable", "--onyl", "tprof"}, "swtrace enable: unknown option --onyl: did you mean --only? (swtrace enable --help for more)\n"},
		// a wrong --unwind is refused before anything is enabled or dropped
		{[]string{"swtrace", "enable", "--only", "--unwind", "lbr", "tprof", "callstack"}, "swtrace enable: --unwind: \"lbr\": use fp (frame pointers) or dwarf[,BYTES] (call-frame information, BYTES of stack copied per sample, default 8192) (swtrace enable --help for more)\n"},
		// a command of subcommands without one: not 25 lines of help
		{[]string{"swtrace", "itrace"}, "swtrace itrace: give a command: on, off or status (swtrace itrace --help for more)\n"},
		{[]string{"swtrace", "daemon", "stp"}, "swtrace daemon: unknown command \"stp\": did you mean stop? (swtrace daemon --help for more)\n"},
		{[]string{"swtrace", "itrace", "on", "-p", "abc"}, "swtrace itrace on: -p \"abc\": not a whole number (swtrace itrace on --help for more)\n"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if code != 2 || errb.String() != c.want || out.Len() != 0 {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want 2 and %q", c.args, code, errb.String(), out.String(), c.want)
		}
	}
}

// swtrace enable lists ITrace as a type to enable; info --json gives the
// names the text gives.
func TestTypesByName(t *testing.T) {
	var b bytes.Buffer
	listTypes(&b, []uint16{trace.MajorSys, trace.MajorMTE, trace.MajorITraceU})
	if !regexp.MustCompile(`(?m)^itrace +0x20 +on +ITrace`).MatchString(b.String()) || strings.Contains(b.String(), "itrace     0x20   n/a") {
		t.Errorf("swtrace enable does not list itrace as available:\n%s", b.String())
	}
	j, err := json.Marshal(newInfoJSON(&control.Status{State: "off", Mode: control.ModeCont, Enabled: []uint16{trace.MajorTprof, trace.MajorSys, trace.MajorMTE}}))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(j), `"mode":"cont"`) || !strings.Contains(string(j), `"enabled":["sys","mte","tprof"]`) || !strings.Contains(string(j), `"state":"off"`) {
		t.Errorf("info --json: %s", j)
	}
}
