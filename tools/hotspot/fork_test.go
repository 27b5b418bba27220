package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestForkedChildren: the target is a shell that forks and execs the
// example, half a second each, one after the other until the walk is
// over (the test then ends the loop): the work is only ever in children,
// most of them created after the walk started. The sampling finds hot in
// them, every level's probes are hit in several successive children
// (attached as they appear, or probed per CPU), and the walk finds hot's
// callers with the example's split, then b, a; the shell's output and
// exit code (the last child's 3) are unchanged. A level lasts 2.5 s, five
// children, with the probes always in place (the budget, which can keep
// them out for most of a level on a busy machine, is TestOverheadBudget's).
func TestForkedChildren(t *testing.T) {
	build(t)
	dir := t.TempDir()
	js := filepath.Join(dir, "r.json")
	stop := filepath.Join(dir, "stop")
	script := "while [ ! -e " + stop + " ]; do " + tools.example + " 0.5; done"
	c := exec.Command(tools.hotspot, "-q", "-s", "1", "--period", "2.5s", "--max-overhead", "0", "--json", js, "-o", filepath.Join(dir, "r.txt"), "--", "sh", "-c", script)
	var out bytes.Buffer
	c.Stdout = &out
	err := runWalk(t, c, js, func(Report) error { return os.WriteFile(stop, nil, 0o644) }, nil)
	if !isExit(err, 3) {
		t.Fatalf("exit %v: want the shell's 3 (its last child's)", err)
	}
	if n := len(regexp.MustCompile(`(?m)^hotspot-example: iterations=\d+ .*cpu_us=\d+$`).FindAllString(out.String(), -1)); n == 0 || n != strings.Count(out.String(), "\n") {
		t.Fatalf("%d example lines in the output, want only the children's lines:\n%s", n, out.String())
	}
	r := readReport(t, js)
	if len(r.Hot) == 0 || r.Hot[0].Name != "hot" {
		t.Fatalf("hot functions %+v: want hot, sampled in the children", r.Hot)
	}
	want := [][]string{{"hot"}, {"c", "x"}, {"b"}, {"a"}}
	if len(r.Levels) != len(want) {
		t.Fatalf("levels %+v: want %v", r.Levels, want)
	}
	for i, lv := range r.Levels {
		if strings.Join(sortStrings(append([]string(nil), lv.Frontier...)), " ") != strings.Join(want[i], " ") {
			t.Errorf("level %d frontier %v, want %v", i, lv.Frontier, want[i])
		}
		kids := 0
		for _, p := range lv.PIDs {
			if p != r.PID {
				kids++
			}
		}
		if kids < 2 || kids != len(lv.PIDs) {
			t.Errorf("level %d: probes hit in processes %v (shell %d): want several children, never the shell", i, lv.PIDs, r.PID)
		}
	}
	if sh := callerShares(funcByLevel(r, 0)["hot"]); !near(sh["c"], 2.0/3, 0.06) || !near(sh["x"], 1.0/3, 0.06) {
		t.Errorf("hot's callers %v, want c 2/3, x 1/3", sh)
	}
	// A child whose whole life falls between two of the walk's scans of
	// the tree (hotspot itself starved of CPU beside a busy job) has its
	// callers unnamed, "[exited PID ADDR]": a few such calls are allowed,
	// any other caller is not.
	sh, unnamed := namedShares(callerShares(funcByLevel(r, 3)["a"]))
	if len(sh) != 1 || sh["main"] == 0 || unnamed > 0.01 {
		t.Errorf("a's callers %v (%.2f%% from exited children not named): want main", sh, 100*unnamed)
	}
}

// namedShares splits caller shares into the named callers' and the total
// share of callers in processes that ended before their mappings were
// read.
func namedShares(sh map[string]float64) (map[string]float64, float64) {
	named, unnamed := map[string]float64{}, 0.0
	for name, v := range sh {
		if strings.HasPrefix(name, "[exited ") {
			unnamed += v
		} else {
			named[name] = v
		}
	}
	return named, unnamed
}
