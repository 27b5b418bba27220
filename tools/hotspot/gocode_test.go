package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goSort sorts strings on four goroutines for the seconds it is given (or
// until SIGUSR1) and says how much it sorted: hot Go code, with goroutine
// stacks that the runtime grows and moves while it runs.
const goSort = `package main

import (
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

var stop atomic.Bool

func work(seed int, until time.Time) int {
	n := 0
	for time.Now().Before(until) && !stop.Load() {
		s := make([]string, 2000)
		for i := range s {
			s[i] = strconv.Itoa((i*7919 + seed) % 100003)
		}
		sort.Strings(s)
		n++
	}
	return n
}

func main() {
	secs, _ := strconv.ParseFloat(os.Args[1], 64)
	until := time.Now().Add(time.Duration(secs * float64(time.Second)))
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() { <-usr1; stop.Store(true) }()
	var wg sync.WaitGroup
	total := make([]int, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) { defer wg.Done(); total[g] = work(g, until) }(g)
	}
	wg.Wait()
	fmt.Println("gosort: done", total[0] > 0 && total[1] > 0 && total[2] > 0 && total[3] > 0)
}
`

// TestGoCodeNotInstrumented: a Go program's hot functions are sampled and
// named but never probed (a return probe there can crash Go's runtime):
// the program runs to its end with its normal output, and the report says
// why its code was not instrumented.
func TestGoCodeNotInstrumented(t *testing.T) {
	build(t)
	dir := t.TempDir()
	src, prog := filepath.Join(dir, "gosort.go"), filepath.Join(dir, "gosort")
	if err := os.WriteFile(src, []byte(goSort), 0o644); err != nil {
		t.Fatal(err)
	}
	b := exec.Command("go", "build", "-o", prog, src)
	b.Dir = dir
	b.Env = append(os.Environ(), "GO111MODULE=off", "GOFLAGS=")
	if out, err := b.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	js := filepath.Join(dir, "r.json")
	// -s 2: beside a busy machine 0.5 s of sampling caught the Go program
	// still starting (no hot function)
	out, err := walkExample(t, js, "-q", "-s", "2", "--period", "500ms", "--json", js, "-o", os.DevNull, "--", prog, longRun)
	if err != nil || out != "gosort: done true\n" {
		t.Fatalf("exit %v, output %q: want the Go program's own line and exit 0", err, out)
	}
	r := readReport(t, js)
	if len(r.Hot) == 0 {
		t.Fatal("no hot function sampled in the Go program")
	}
	for _, f := range r.Hot {
		if f.Path == prog && !strings.Contains(f.NoProbe, "Go code") {
			t.Errorf("hot Go function %+v not marked as Go code", f)
		}
	}
	if len(r.Levels) != 0 || r.HookHits != 0 {
		t.Fatalf("levels %+v, %d probe hits: want no probe in Go code", r.Levels, r.HookHits)
	}
}

// TestIsGo: a Go executable is recognised by its .go.buildinfo section,
// and without it (removed here with objcopy) by its runtime.main symbol;
// the bundled C example is not Go.
func TestIsGo(t *testing.T) {
	build(t)
	need(t, "objcopy")
	dir := t.TempDir()
	prog, bare := filepath.Join(dir, "gosort"), filepath.Join(dir, "gosort-bare")
	if out, err := exec.Command("go", "build", "-o", prog, "./testdata/gosort").CombinedOutput(); err != nil {
		t.Fatalf("build testdata/gosort: %v\n%s", err, out)
	}
	if out, err := exec.Command("objcopy", "--remove-section=.go.buildinfo", prog, bare).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, out)
	}
	for path, want := range map[string]bool{prog: true, bare: true, tools.example: false} {
		if got := isGo(path); got != want {
			t.Errorf("isGo(%s) = %v, want %v", path, got, want)
		}
	}
}
