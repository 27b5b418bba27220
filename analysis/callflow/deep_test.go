package callflow

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// deepProcess is a thread where main calls rec, which calls itself until
// depth frames of rec are open, then every frame returns.
func deepProcess(depth int) *Process {
	var evs []Event
	t, sp := uint64(0), uint64(1<<30)
	ev := func(kind uint8, fn uint64) {
		evs = append(evs, Event{Kind: kind, Fn: fn, SP: sp, Early: t, Late: t + 10})
		t += 20
	}
	ev(KindEnter, 0xa)
	for i := 0; i < depth; i++ {
		sp -= 32
		ev(KindEnter, 0xb)
	}
	for i := 0; i < depth; i++ {
		ev(KindExit, 0xb)
		sp += 32
	}
	ev(KindExit, 0xa)
	return &Process{Info: Info{PID: 7, Metric: "rdtsc"}, Names: map[uint64]string{0xa: "main", 0xb: "rec"},
		Threads: []*Thread{{PID: 7, TID: 7, Events: evs}}}
}

// TestDeepRecursionReportsLinear: the reports of a recursion twice as
// deep allocate about twice as much, not four times (a string per call
// path made hookit report take 96 s and 1.3 GB at depth 10,000), and the
// folded stacks and the pprof profile hold every path, whole.
func TestDeepRecursionReportsLinear(t *testing.T) {
	allocs := map[int]uint64{}
	for _, depth := range []int{1500, 3000} {
		p := deepProcess(depth)
		var pb bytes.Buffer
		folded, err := os.Create(filepath.Join(t.TempDir(), "folded"))
		if err != nil {
			t.Fatal(err)
		}
		defer folded.Close()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		a := AnalyzeWith(p, Calibration{})
		for _, w := range []func(io.Writer) error{a.WriteLogRT, a.WriteLogGen, a.WriteChrome} {
			if err := w(io.Discard); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.WriteFolded(folded); err != nil {
			t.Fatal(err)
		}
		if err := a.WritePprof(&pb); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		allocs[depth] = after.TotalAlloc - before.TotalAlloc
		t.Logf("depth %d: %d KB allocated", depth, allocs[depth]>>10)
		if _, err := folded.Seek(0, 0); err != nil {
			t.Fatal(err)
		}

		lines, deepest := 0, 0
		sc := bufio.NewScanner(folded)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			l := sc.Text()
			if !strings.HasPrefix(l, "tid_7;main") {
				t.Fatalf("folded line %.80q", l)
			}
			lines++
			deepest = max(deepest, strings.Count(l, ";")+1)
		}
		if lines != depth+1 || deepest != depth+2 {
			t.Fatalf("depth %d: %d folded lines (want %d), deepest %d frames (want %d)", depth, lines, depth+1, deepest, depth+2)
		}
		prof, err := profile.Parse(&pb)
		if err != nil {
			t.Fatal(err)
		}
		var calls int64
		longest := 0
		for _, s := range prof.Sample {
			calls += s.Value[0]
			longest = max(longest, len(s.Location))
		}
		if len(prof.Sample) != depth+1 || calls != int64(depth+1) || longest != depth+1 || prof.SampleType[1].Type != "rdtsc" {
			t.Fatalf("pprof: %d samples, %d calls (want %d each), longest stack %d (want %d)", len(prof.Sample), calls, depth+1, longest, depth+1)
		}
	}
	if allocs[3000] > 3*allocs[1500] {
		t.Fatalf("twice the depth allocated %.1f times as much (%d KB, then %d KB): quadratic", float64(allocs[3000])/float64(allocs[1500]), allocs[1500]>>10, allocs[3000]>>10)
	}
}

// TestLoadRefusesFIFO: a FIFO planted under a thread file's name (or as
// the .maps copy) makes Load fail at once, saying what it is, instead of
// waiting for a writer.
func TestLoadRefusesFIFO(t *testing.T) {
	for _, name := range []string{"hookit-5-5.bin", "hookit-5.maps"} {
		dir := t.TempDir()
		if err := syscall.Mkfifo(filepath.Join(dir, name), 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := Load(dir)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "named pipe") {
				t.Fatalf("%s a FIFO: %v", name, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s a FIFO: Load still waiting after 20 s", name)
		}
	}
}
