package otlpexport

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"perfinsp/daemon/otlpexport/otlptest"
)

// request makes a request of one process whose resource carries seq and
// whose one sample counts samples; pad bytes of command line make it big.
func request(seq int, samples int64, pad int) pprofile.Profiles {
	p := pprofile.NewProfiles()
	d := p.Dictionary()
	d.StringTable().Append("", "samples", "count", "f")
	d.MappingTable().AppendEmpty()
	d.LocationTable().AppendEmpty()
	d.FunctionTable().AppendEmpty()
	d.StackTable().AppendEmpty()
	d.AttributeTable().AppendEmpty()
	d.FunctionTable().AppendEmpty().SetNameStrindex(3)
	d.LocationTable().AppendEmpty().Lines().AppendEmpty().SetFunctionIndex(1)
	d.StackTable().AppendEmpty().LocationIndices().Append(1)
	rp := p.ResourceProfiles().AppendEmpty()
	rp.Resource().Attributes().PutInt("seq", int64(seq))
	rp.Resource().Attributes().PutStr("process.command_line", strings.Repeat("x", pad))
	prof := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	prof.SampleType().SetTypeStrindex(1)
	prof.SampleType().SetUnitStrindex(2)
	s := prof.Samples().AppendEmpty()
	s.SetStackIndex(1)
	s.Values().Append(samples)
	return p
}

// seqs lists the seq attribute of every request received, in order.
func seqs(ps []pprofile.Profiles) []int64 {
	var out []int64
	for _, p := range ps {
		for i := 0; i < p.ResourceProfiles().Len(); i++ {
			v, _ := p.ResourceProfiles().At(i).Resource().Attributes().Get("seq")
			out = append(out, v.Int())
		}
	}
	return out
}

func run(t *testing.T, e *Exporter) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	return func() { cancel(); <-done; _ = e.Close() }
}

func fast(cfg Config) Config {
	cfg.BackoffMin, cfg.BackoffMax, cfg.Timeout = 20*time.Millisecond, 100*time.Millisecond, 2*time.Second
	return cfg
}

func hasSeqs(n int) func([]pprofile.Profiles) bool {
	return func(ps []pprofile.Profiles) bool { return len(seqs(ps)) >= n }
}

// TestDownThenUp: the collector is down while requests are queued (over
// both protocols); when it comes back every request arrives, once and in
// order, and the failed attempts were counted.
func TestDownThenUp(t *testing.T) {
	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			rcv := otlptest.Start(t)
			cfg := Config{Protocol: proto, Endpoint: rcv.HTTPURL}
			if proto == "grpc" {
				cfg.Endpoint, cfg.Insecure = rcv.GRPCAddr, true
			}
			e, err := New(fast(cfg))
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, e)
			defer stop()
			if err := e.Enqueue(request(0, 5, 0), 5); err != nil {
				t.Fatal(err)
			}
			rcv.WaitFor(t, 30*time.Second, "the first request", hasSeqs(1))
			waitStats(t, e, func(st Stats) bool { return st.Sent == 1 })
			rcv.Stop()
			for i := 1; i <= 10; i++ {
				if err := e.Enqueue(request(i, 5, 0), 5); err != nil {
					t.Fatal(err)
				}
			}
			// It keeps failing while the collector is down.
			deadline := time.Now().Add(30 * time.Second)
			for e.Stats().Failures < 3 {
				if time.Now().After(deadline) {
					t.Fatalf("no failed attempts counted with the collector down: %+v", e.Stats())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if st := e.Stats(); st.Queued != 10 || st.Dropped != 0 {
				t.Fatalf("with the collector down: %+v, want 10 queued, none dropped", st)
			}
			rcv.Up(t)
			got := rcv.WaitFor(t, 30*time.Second, "all 11 requests", hasSeqs(11))
			s := seqs(got)
			for i, v := range s {
				if v != int64(i) {
					t.Fatalf("received seqs %v: want 0..10 once each, in order", s)
				}
			}
			// (the receiver keeps a request before its answer reaches the exporter)
			st := waitStats(t, e, func(st Stats) bool { return st.Sent+st.Dropped == 11 })
			t.Logf("%s: %+v", proto, st)
			if st.Sent != 11 || st.SentSamples != 55 || st.Dropped != 0 || st.Queued != 0 {
				t.Errorf("stats %+v: want 11 sent (55 samples), none dropped or queued", st)
			}
		})
	}
}

// TestNoListener: nothing listens at the endpoint: nothing is delivered,
// nothing crashes, memory stays within the queue bound and the drops are
// counted with their samples.
func TestNoListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	e, err := New(fast(Config{Protocol: "http", Endpoint: "http://" + addr, QueueBytes: 100 << 10}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, e)
	defer stop()
	var want int64
	for i := 0; i < 50; i++ {
		_ = e.Enqueue(request(i, 7, 10<<10), 7)
		want += 7
	}
	st := e.Stats()
	if st.QueuedBytes > 100<<10 || st.Queued == 0 {
		t.Errorf("%d bytes in %d requests queued: want some, at most 100 KiB", st.QueuedBytes, st.Queued)
	}
	if got := int64(st.DroppedSamples) + int64(st.Queued)*7; got != want || st.Dropped == 0 {
		t.Errorf("dropped %d samples and %d requests queued of %d samples: the counts do not add up (%+v)", st.DroppedSamples, st.Queued, want, st)
	}
}

// TestSpool: past the memory bound requests go to the spool directory;
// past its bound the oldest are dropped and counted; the spool is
// delivered in order by the next exporter (an agent restarted) when the
// collector is back.
func TestSpool(t *testing.T) {
	rcv := otlptest.Start(t)
	rcv.Stop()
	dir := filepath.Join(t.TempDir(), "spool")
	body, _ := requestSize(t)
	cfg := fast(Config{Protocol: "http", Endpoint: rcv.HTTPURL, QueueBytes: 2 * body, SpoolDir: dir, SpoolBytes: 3 * body})
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, e)
	for i := 0; i < 10; i++ {
		_ = e.Enqueue(request(i, 3, 4096), 3)
	}
	st := e.Stats()
	t.Logf("down: %+v", st)
	if st.Queued != 5 || st.Spooled != 3 || st.Dropped != 5 || st.DroppedSamples != 15 {
		t.Errorf("10 requests, room for 2 in memory and 3 on disk: %+v, want 5 queued (3 on disk), 5 dropped (15 samples)", st)
	}
	stop() // Close spools the two in memory
	ents, _ := os.ReadDir(dir)
	if len(ents) != 3 {
		// Close made room for the 2 in memory by dropping the 2 oldest spooled.
		t.Errorf("spool holds %d files after Close, want 3", len(ents))
	}
	fi, _ := os.Stat(dir)
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("spool directory mode %v, want 0700", fi.Mode().Perm())
	}
	rcv.Up(t)
	cfg.Endpoint = rcv.HTTPURL
	e2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop2 := run(t, e2)
	defer stop2()
	got := rcv.WaitFor(t, 30*time.Second, "the spooled requests", hasSeqs(3))
	if s := seqs(got); len(s) != 3 || s[0] != 7 || s[1] != 8 || s[2] != 9 {
		t.Errorf("delivered after the restart: %v, want the newest three 7 8 9 in order", s)
	}
}

func waitStats(t *testing.T, e *Exporter, cond func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := e.Stats()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("exporter counts not reached in 30 s: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func requestSize(t *testing.T) (int64, error) {
	e := &Exporter{wake: make(chan struct{}, 1)}
	e.q.maxMem = 1 << 30
	if err := e.Enqueue(request(0, 3, 4096), 3); err != nil {
		t.Fatal(err)
	}
	return e.q.memBytes, nil
}

// TestHangingCollector: a collector that accepts requests and never
// answers: each attempt ends at the timeout, the queue stays within its
// bound and the heap does not grow with the requests enqueued.
func TestHangingCollector(t *testing.T) {
	rcv := otlptest.Start(t)
	rcv.SetHang(true)
	cfg := fast(Config{Protocol: "http", Endpoint: rcv.HTTPURL, QueueBytes: 1 << 20})
	cfg.Timeout = 200 * time.Millisecond
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, e)
	defer stop()
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	before := ms.HeapAlloc
	for i := 0; i < 400; i++ {
		_ = e.Enqueue(request(i, 1, 64<<10), 1) // 400 x 64 KiB = 25 MiB offered
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.Stats().Failures < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("attempts to a hanging collector do not time out: %+v", e.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	st := e.Stats()
	grew := int64(ms.HeapAlloc) - int64(before)
	t.Logf("heap grew %d KiB; %+v", grew>>10, st)
	if st.QueuedBytes > 1<<20 {
		t.Errorf("%d bytes queued, bound 1 MiB", st.QueuedBytes)
	}
	if grew > 4<<20 {
		t.Errorf("heap grew %d KiB for 25 MiB offered to a 1 MiB queue", grew>>10)
	}
	if st.Dropped < 380 {
		t.Errorf("%d requests dropped of 400 (1 MiB holds at most 15)", st.Dropped)
	}
}

// TestRejected: a request the collector refuses as bad (HTTP 400) is
// dropped and counted, not retried for ever.
func TestRejected(t *testing.T) {
	rcv := otlptest.Start(t)
	rcv.SetStatus(400)
	e, err := New(fast(Config{Protocol: "http", Endpoint: rcv.HTTPURL}))
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, e)
	defer stop()
	_ = e.Enqueue(request(0, 4, 0), 4)
	deadline := time.Now().Add(30 * time.Second)
	for e.Stats().Rejected == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not rejected: %+v", e.Stats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st := e.Stats(); st.Dropped != 1 || st.DroppedSamples != 4 || st.Queued != 0 || !strings.Contains(st.LastError, "400") {
		t.Errorf("%+v: want 1 dropped (4 samples), nothing queued, the 400 in LastError", st)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{
		{Protocol: "ftp", Endpoint: "x:1"},
		{Protocol: "http", Endpoint: "collector:4318"},
		{Protocol: "http", Endpoint: "file:///etc/passwd"},
		{Protocol: "grpc", Endpoint: "http://collector:4317"},
		{Protocol: "http", Endpoint: "https://c:4318", CAFile: "/nonexistent"},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		} else {
			t.Logf("%s %s: %v", c.Protocol, c.Endpoint, err)
		}
	}
}

var _ = pcommon.NewMap
