package ptt

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"perfinsp/internal/testenv"
	"perfinsp/libperfutil/events"
)

// TestMetricsFromEventTable: every PTT metric but tsc is an event of the
// project's one table, with its type and config.
func TestMetricsFromEventTable(t *testing.T) {
	if got := len(Metrics()); got != len(pttEvents)+1 {
		t.Fatalf("%d metrics, want tsc + %d events: a name of pttEvents is missing from libperfutil/events", got, len(pttEvents))
	}
	for _, m := range Metrics() {
		if m.Name == "tsc" {
			continue
		}
		e, ok := events.Lookup(m.Name)
		if !ok || e.Type != m.perfType || e.Config != m.config || e.Hardware != m.Hardware {
			t.Errorf("metric %s (type %d config %#x hw %v) differs from events %s hw %v", m.Name, m.perfType, m.config, m.Hardware, e, e.Hardware)
		}
	}
}

// TestCTableAgreesWithEventTable compiles a program that prints the C
// library's metric table (libperfutil/c/ptt.c, metrics_tab) and checks it
// against the Go PTT metrics and the event table: the same names, and for
// each the same perf type, config and hardware flag.
func TestCTableAgreesWithEventTable(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		testenv.Missing(t, "gcc is missing (scripts/deps/ptt.txt): %v", err)
	}
	dir := t.TempDir()
	src, err := filepath.Abs("../c/ptt.c")
	if err != nil {
		t.Fatal(err)
	}
	prog := `#include "` + src + `"
#include <stdio.h>
int main(void)
{
	for (int i = 0; i < NTAB; i++)
		printf("%s %u %llu %d %d\n", metrics_tab[i].name, metrics_tab[i].type,
		       (unsigned long long)metrics_tab[i].config, metrics_tab[i].hw, metrics_tab[i].tsc);
	return 0;
}
`
	if err := os.WriteFile(filepath.Join(dir, "ctable.c"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	inc, _ := filepath.Abs("../c/include")
	bin := filepath.Join(dir, "ctable")
	if out, err := exec.Command(cc, "-O0", "-Wall", "-Werror", "-Wno-unused-function", "-pthread", "-I"+inc,
		"-o", bin, filepath.Join(dir, "ctable.c"), "-lm").CombinedOutput(); err != nil {
		t.Fatalf("compile the C table printer: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("run the C table printer: %v", err)
	}
	cnames := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 5 {
			t.Fatalf("C table line %q", sc.Text())
		}
		name := f[0]
		typ, _ := strconv.ParseUint(f[1], 10, 32)
		cfg, _ := strconv.ParseUint(f[2], 10, 64)
		hw, tsc := f[3] == "1", f[4] == "1"
		cnames[name] = true
		if tsc {
			if name != "tsc" {
				t.Errorf("C metric %s marked tsc", name)
			}
			continue
		}
		e, ok := events.Lookup(name)
		if !ok {
			t.Errorf("C metric %s is not in libperfutil/events", name)
			continue
		}
		if e.Name != name || uint64(e.Type) != typ || e.Config != cfg || e.Hardware != hw {
			t.Errorf("C metric %s: type %d config %#x hw %v; events: %s hw %v", name, typ, cfg, hw, e, e.Hardware)
		}
	}
	if len(cnames) < 2 {
		t.Fatalf("the C table printer printed %d metrics", len(cnames))
	}
	for _, m := range Metrics() {
		if !cnames[m.Name] {
			t.Errorf("Go PTT metric %s is missing from the C table", m.Name)
		}
		delete(cnames, m.Name)
	}
	for n := range cnames {
		t.Errorf("C metric %s is not a Go PTT metric", n)
	}
}
