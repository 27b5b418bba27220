package main

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"perfinsp/internal/testenv"
	"perfinsp/libperfutil/uprobe"
)

// TestLevelClosesAtOnce: a level's probes are held by dynamic events, so
// removing them does not wait for the kernel's grace periods while the
// probes not yet closed go on trapping: every level's closing phase (2
// probes at the first, 4 at the second) takes less than the close of one
// probe of the uprobe PMU on the same function of another run of the
// program (each such close waits for a grace period, so the closing phase
// of a level of n PMU probes takes n of them at least).
func TestLevelClosesAtOnce(t *testing.T) {
	build(t)
	testenv.Retry(t, 3, "closing phase against one PMU close", func(a *testenv.Attempt) { levelClosesOnce(t, a) })
}

func levelClosesOnce(t *testing.T, a *testenv.Attempt) {
	js := filepath.Join(t.TempDir(), "r.json")
	out, err := walkExample(t, js, "-q", "-s", "0.5", "--depth", "2", "--max-overhead", "0", "--period", "300", "--level-max", "0", "--json", js, "-o", os.DevNull, "--", tools.example, longRun, "200")
	if !isExit(err, 3) || allRE.FindString(out) == "" {
		t.Fatalf("exit %v, output %q: want the example's line and exit 3", err, out)
	}
	r := readReport(t, js)
	hot := funcByLevel(r, 0)["hot"]
	if len(r.Levels) != 2 || hot == nil {
		t.Fatalf("levels %+v, hot %+v: want 2 levels, hot at the first", r.Levels, hot)
	}
	gp := pmuCloseTime(t, hot.Path, hot.Off)
	for _, lv := range r.Levels {
		t.Logf("level %d %v: %d probes closed in %.3f ms (dynamic events %v, their anchors then in %.1f ms); one PMU probe's close %.1f ms",
			lv.Level, lv.Frontier, lv.Probes, lv.CloseSec*1e3, lv.Dynamic, lv.AnchorCloseSec*1e3, float64(gp)/1e6)
		if !lv.Dynamic {
			t.Fatalf("level %d: the probes were not held by dynamic events (tracefs uprobe_events not writable?)", lv.Level)
		}
		if lv.Probes < 2 || lv.CloseSec >= gp.Seconds() {
			a.Errorf("level %d: %d probes closed in %.1f ms, one probe of the PMU in %.1f ms: want less", lv.Level, lv.Probes, lv.CloseSec*1e3, float64(gp)/1e6)
		}
	}
}

// pmuCloseTime is the time the close of a probe of the uprobe PMU at off
// of path takes on a running example that has hit it: the best of two.
func pmuCloseTime(t *testing.T, path string, off uint64) time.Duration {
	t.Helper()
	pmu, err := uprobe.System()
	if err != nil {
		t.Fatal(err)
	}
	target, _ := startExample(t, tools.example, longRun, nil)
	var best time.Duration
	for i := 0; i < 2; i++ {
		p, err := pmu.OpenWith(path, off, false, target.Process.Pid, uprobe.OpenOpts{Group: -1})
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; {
			var b [8]byte
			if n, err := unix.Read(p.FD, b[:]); err != nil || n != 8 {
				t.Fatalf("read probe count: %d bytes, %v", n, err)
			}
			if binary.LittleEndian.Uint64(b[:]) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the PMU probe on hot never trapped")
			}
			time.Sleep(time.Millisecond)
		}
		t0 := time.Now()
		p.Close()
		if d := time.Since(t0); best == 0 || d < best {
			best = d
		}
	}
	return best
}
