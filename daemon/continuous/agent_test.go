package continuous

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"perfinsp/daemon/otlpexport"
	"perfinsp/daemon/otlpexport/otlptest"
	"perfinsp/internal/testenv"
	"perfinsp/internal/tracetest"
)

// busyCPU keeps a process of its own on a CPU until the test ends: the
// agent samples the whole machine, and an idle one gives it nothing to
// count (its idle ticks are no one's samples).
func busyCPU(t *testing.T) {
	t.Helper()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "the continuous mode samples every CPU: the tests need root (CI runs them as root)")
	}
}

func buildBurn(t *testing.T, dir string) string {
	t.Helper()
	burn := filepath.Join(dir, "cpuburn")
	if out, err := exec.Command("gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread", "-o", burn,
		filepath.Join(tracetest.Root(), "examples", "cpuburn.c")).CombinedOutput(); err != nil {
		t.Fatalf("build cpuburn: %v\n%s", err, out)
	}
	return burn
}

// runAgent runs the agent until stop is closed and returns its counts.
func runAgent(t *testing.T, cfg Config) (stop func() Stats) {
	t.Helper()
	if cfg.CacheDir == "" {
		cfg.CacheDir = filepath.Join(t.TempDir(), "a2n")
	}
	cfg.Log = t.Logf
	a, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, 20*time.Second) }()
	return func() Stats {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
		return a.Stats()
	}
}

func byPID(pid int) func(pcommon.Map) bool {
	return func(m pcommon.Map) bool {
		v, ok := m.Get("process.pid")
		return ok && v.Int() == int64(pid)
	}
}

// perfShares runs perf record on pid at hz for the same run and returns
// the share of its samples whose stack holds each of fns.
func perfShares(t *testing.T, data string, fns ...string) (map[string]float64, int) {
	t.Helper()
	out, err := exec.Command("perf", "script", "-i", data, "-F", "comm,tid,ip,sym").Output()
	if err != nil {
		t.Fatalf("perf script: %v", err)
	}
	counts := map[string]int{}
	total := 0
	seen := map[string]bool{}
	inSample := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			inSample = false
			continue
		}
		if !inSample {
			inSample = true
			total++
			clear(seen)
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		sym := f[1]
		if i := strings.IndexByte(sym, '+'); i > 0 {
			sym = sym[:i]
		}
		for _, fn := range fns {
			if sym == fn && !seen[fn] {
				seen[fn] = true
				counts[fn]++
			}
		}
	}
	shares := map[string]float64{}
	for _, fn := range fns {
		if total > 0 {
			shares[fn] = 100 * float64(counts[fn]) / float64(total)
		}
	}
	return shares, total
}

// TestCpuburnOverHTTPAndGRPC: the agent profiles the bundled -O2 example
// (frame pointers) while perf record samples the same run at the same
// rate; the profiles an in-process OTLP receiver gets name heavy, medium
// and light with perf's shares within 4 points, carry the resource
// attributes, and add up to the agent's own sample count.
func TestCpuburnOverHTTPAndGRPC(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("perf"); err != nil {
		testenv.Missing(t, "perf is missing (scripts/install-deps.sh installs linux-perf)")
	}
	dir := t.TempDir()
	burn := buildBurn(t, dir)
	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			rcv := otlptest.Start(t)
			exp := otlpexport.Config{Protocol: proto, Endpoint: rcv.HTTPURL}
			if proto == "grpc" {
				exp.Endpoint, exp.Insecure = rcv.GRPCAddr, true
			}
			const hz = 499
			stop := runAgent(t, Config{RateHz: hz, Interval: time.Second, Export: exp})
			cmd := exec.Command(burn, "400")
			var out bytes.Buffer
			cmd.Stdout = &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			data := filepath.Join(t.TempDir(), "perf.data")
			perf := exec.Command("perf", "record", "-q", "-F", fmt.Sprint(hz), "-g", "-e", "cpu-clock", "-o", data, "-p", fmt.Sprint(pid))
			var perfErr bytes.Buffer
			perf.Stderr = &perfErr
			if err := perf.Start(); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("cpuburn: %v", err)
			}
			_ = perf.Wait() // it ends with the process it follows
			st := stop()
			got, _ := rcv.Received()
			s := otlptest.Summarize(got, byPID(pid))
			if s.Total < 500 {
				t.Fatalf("only %d samples of cpuburn (pid %d) received in %d requests", s.Total, pid, len(got))
			}
			trio := s.Inclusive["heavy"] + s.Inclusive["medium"] + s.Inclusive["light"]
			pshares, ptotal := perfShares(t, data, "heavy", "medium", "light")
			want := map[string]float64{"heavy": 60, "medium": 30, "light": 10}
			for _, fn := range []string{"heavy", "medium", "light"} {
				ours := s.Share(s.Inclusive[fn])
				t.Logf("%-6s agent %5.1f %% of %d samples, perf %5.1f %% of %d samples; of the three: agent %5.1f %% (work split %v %%)",
					fn, ours, s.Total, pshares[fn], ptotal, 100*float64(s.Inclusive[fn])/float64(trio), want[fn])
				if ptotal > 200 && math.Abs(ours-pshares[fn]) > 4 {
					t.Errorf("%s: agent %.1f %%, perf %.1f %% of the same run: more than 4 points apart", fn, ours, pshares[fn])
				}
				if rel := 100 * float64(s.Inclusive[fn]) / float64(trio); math.Abs(rel-want[fn]) > 4 {
					t.Errorf("%s: %.1f %% of heavy+medium+light, want %v within 4 points", fn, rel, want[fn])
				}
			}
			if ptotal <= 200 {
				t.Errorf("perf record took only %d samples (%s)", ptotal, perfErr.String())
			}
			if s.Inclusive["work"] < s.Total*9/10 {
				t.Errorf("work is on %d of %d stacks: the stacks are cut", s.Inclusive["work"], s.Total)
			}
			host, _ := os.Hostname()
			r := s.Resources[0]
			for k, v := range map[string]any{"host.name": host, "process.pid": int64(pid), "process.executable.name": "cpuburn",
				"process.executable.path": burn, "service.name": "unknown_service:cpuburn"} {
				if r[k] != v {
					t.Errorf("resource attribute %s = %v, want %v (all: %v)", k, r[k], v, r)
				}
			}
			names := map[string]bool{}
			for _, n := range s.Threads {
				names[n] = true
			}
			if !names["cpuburn-main"] || !names["cpuburn-worker"] {
				t.Errorf("thread names %v, want cpuburn-main and cpuburn-worker", s.Threads)
			}
			all := otlptest.Summarize(got, func(pcommon.Map) bool { return true })
			if all.Total != st.TotalSamples || st.Export.SentSamples != uint64(st.TotalSamples) {
				t.Errorf("received %d samples, the agent counted %d and sent %d", all.Total, st.TotalSamples, st.Export.SentSamples)
			}
			if st.Export.Dropped != 0 || st.Dropped != 0 {
				t.Errorf("drops with the endpoint up: %+v", st)
			}
		})
	}
}

// TestGoBinary: a Go program's hot function, by frame pointers, with its
// share of the work.
func TestGoBinary(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "gohot")
	build := exec.Command("go", "build", "-o", bin, "./testdata/gohot")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	rcv := otlptest.Start(t)
	stop := runAgent(t, Config{RateHz: 499, Interval: time.Second, Export: otlpexport.Config{Protocol: "http", Endpoint: rcv.HTTPURL}})
	cmd := exec.Command(bin, "3") // seconds of its own CPU time
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	stop()
	got, _ := rcv.Received()
	s := otlptest.Summarize(got, byPID(pid))
	hot, cold := s.Leaf["main.hot"], s.Leaf["main.cold"]
	t.Logf("gohot: %d samples, main.hot %.1f %%, main.cold %.1f %%, runtime.main %.1f %% (on the stack)", s.Total, s.Share(hot), s.Share(cold), s.Share(s.Inclusive["runtime.main"]))
	if s.Total < 500 {
		t.Fatalf("only %d samples of gohot", s.Total)
	}
	if rel := 100 * float64(hot) / float64(hot+cold); math.Abs(rel-75) > 5 {
		t.Errorf("main.hot is %.1f %% of main.hot+main.cold, want 75 within 5 points", rel)
	}
	// (hot and cold are frameless leaves: a frame-pointer walk goes
	// from them to main.main's caller, as perf's does.)
	if s.Inclusive["runtime.main"] < s.Total*8/10 {
		t.Errorf("runtime.main on %d of %d stacks: Go stacks are cut", s.Inclusive["runtime.main"], s.Total)
	}
}

// profileIDs lists the profile ids received and how often each came.
func profileIDs(ps []pprofile.Profiles) map[pprofile.ProfileID]int {
	ids := map[pprofile.ProfileID]int{}
	for _, p := range ps {
		for i := 0; i < p.ResourceProfiles().Len(); i++ {
			sps := p.ResourceProfiles().At(i).ScopeProfiles()
			for j := 0; j < sps.Len(); j++ {
				for k := 0; k < sps.At(j).Profiles().Len(); k++ {
					ids[sps.At(j).Profiles().At(k).ProfileID()]++
				}
			}
		}
	}
	return ids
}

// TestCollectorDownMidRun: the collector stops for 10 s of a run of 1 s
// intervals and comes back: every interval arrives, none twice, and the
// samples received add up to the agent's count; sampling went on
// meanwhile (no records dropped).
func TestCollectorDownMidRun(t *testing.T) {
	needRoot(t)
	busyCPU(t) // every interval has samples
	rcv := otlptest.Start(t)
	exp := otlpexport.Config{Protocol: "http", Endpoint: rcv.HTTPURL, BackoffMin: 200 * time.Millisecond, BackoffMax: 2 * time.Second}
	var intervals []Stats
	var mu sync.Mutex
	cfg := Config{RateHz: 97, Interval: time.Second, Export: exp, OnInterval: func(s Stats) {
		mu.Lock()
		intervals = append(intervals, s)
		mu.Unlock()
	}}
	stop := runAgent(t, cfg)
	rcv.WaitFor(t, 30*time.Second, "the first interval", func(ps []pprofile.Profiles) bool { return len(ps) >= 1 })
	rcv.Stop()
	time.Sleep(10 * time.Second) // the outage itself: its length is what is tested
	rcv.Up(t)
	mu.Lock()
	during := len(intervals)
	mu.Unlock()
	// Two more intervals after the collector is back, then stop.
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(intervals)
		mu.Unlock()
		if n >= during+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no interval ends after the collector came back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	st := stop()
	got, _ := rcv.Received()
	all := otlptest.Summarize(got, func(pcommon.Map) bool { return true })
	t.Logf("%d requests received for %d intervals with samples (%d intervals, %d ended during the outage); %d samples received, agent counted %d; export %+v",
		len(got), st.Requests, st.Intervals, during, all.Total, st.TotalSamples, st.Export)
	if uint64(len(got)) != st.Requests || st.Export.Sent != st.Requests || st.Requests < st.Intervals-1 {
		t.Errorf("%d requests received, %d sent, for %d intervals with samples of %d", len(got), st.Export.Sent, st.Requests, st.Intervals)
	}
	for id, n := range profileIDs(got) {
		if n != 1 {
			t.Errorf("profile %x received %d times", id, n)
		}
	}
	if all.Total != st.TotalSamples || st.Export.Dropped != 0 || st.Export.Failures == 0 {
		t.Errorf("received %d samples of %d, %d dropped, %d failed attempts (want all, none, some)", all.Total, st.TotalSamples, st.Export.Dropped, st.Export.Failures)
	}
	if st.EventsDropped != 0 || st.Lost != 0 {
		t.Errorf("sampling lost records while the collector was down: %d dropped, %d lost", st.EventsDropped, st.Lost)
	}
}

// TestStopDeliversOnce: stopped before its first interval ends, the agent
// sends the partial interval once (a request cut short by the stop was
// sent again by the final flush: received twice).
func TestStopDeliversOnce(t *testing.T) {
	needRoot(t)
	busyCPU(t)
	for i := 0; i < 3; i++ {
		rcv := otlptest.Start(t)
		a, err := Start(Config{RateHz: 97, Interval: time.Hour, CacheDir: t.TempDir(), Export: otlpexport.Config{Protocol: "http", Endpoint: rcv.HTTPURL}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx, 20*time.Second) }()
		deadline := time.Now().Add(30 * time.Second)
		for a.sink.samples.Load() < 20 {
			if time.Now().After(deadline) {
				t.Fatal("no samples in 30 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		st := a.Stats()
		got, _ := rcv.Received()
		all := otlptest.Summarize(got, func(pcommon.Map) bool { return true })
		if len(got) != 1 || all.Total != st.TotalSamples {
			t.Fatalf("run %d: %d requests with %d samples received; the agent counted %d samples in 1 interval", i, len(got), all.Total, st.TotalSamples)
		}
	}
}
