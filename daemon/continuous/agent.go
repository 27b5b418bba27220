package continuous

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"perfinsp/daemon/kevents"
	"perfinsp/daemon/otlpexport"
	"perfinsp/libperfutil/control"
)

// Config is the continuous mode's configuration.
type Config struct {
	RateHz     int           // samples per second of CPU time per CPU (default 97)
	Interval   time.Duration // one profile per process per interval (default 15 s)
	DWARF      bool          // unwind user stacks by call-frame information, not frame pointers
	StackBytes int           // user stack copied per sample with DWARF (default 8192)
	MaxStack   int           // frames per stack (default 127)
	Idle       bool          // keep the idle task's samples
	// OffCPU records the scheduler's switches and the stacks of threads
	// switched out to wait, and exports each thread's time off the CPU
	// (sleeping or blocked, until it runs again) under those stacks, as
	// a profile of its own (sample type off_cpu, nanoseconds).
	OffCPU bool
	// Interrupts records the hard-interrupt and softirq handlers' entries
	// and exits (and the scheduler's switches, to know whose CPU each
	// took) and exports the handlers' time charged to the threads they
	// interrupted, one frame per handler, as a profile of its own (sample
	// type interrupt, nanoseconds).
	Interrupts bool
	CPUs       []int // nil: every online CPU
	Limits     Limits
	// EventQueue bounds the records waiting between the sampler and the
	// aggregator (default 16384: minutes of samples at 97 Hz on a few
	// CPUs; with OffCPU 131072: a second of switches on a busy machine):
	// past it records are dropped and counted.
	EventQueue int
	// Refresh is how often the name tables start anew from /proc (default
	// 10 min): exited processes and replaced files are forgotten.
	Refresh  time.Duration
	CacheDir string            // A2N's table cache ("" : none)
	Host     string            // host.name (default: the kernel's host name)
	Services map[string]string // executable name -> service.name
	Version  string            // the scope's version
	Export   otlpexport.Config
	// Log, if set, gets one line per interval with the agent's counts.
	Log func(format string, args ...any)
	// OnInterval, if set, is called with each interval's counts.
	OnInterval func(Stats)
}

// Stats are the agent's counts: of the last interval and since start.
type Stats struct {
	Intervals       uint64
	Requests        uint64        // intervals with samples: one request each
	Samples         int64         // samples in the last interval's profiles
	OffCPU          time.Duration // off-CPU time in the last interval's profiles (OffCPU)
	TotalOffCPU     time.Duration // since start
	OffCPUDropped   time.Duration // off-CPU and interrupt time over the per-interval limits, since start
	UnstackedWaits  uint64        // waits not counted: their stack did not come (OffCPU)
	Interrupt       time.Duration // interrupt time in the last interval's profiles (Interrupts)
	TotalInterrupt  time.Duration // since start
	TotalSamples    int64         // since start
	Dropped         int64         // samples over the per-interval limits, since start
	Idle            int64         // idle-task samples left out, since start
	EventsDropped   uint64        // records the full event queue dropped
	Lost            uint64        // records the kernel dropped (full rings)
	Processes       int           // processes in the last interval
	Export          otlpexport.Stats
	CPU             time.Duration // the agent's CPU time since start
	MaxRSS          int64         // bytes
	BuildTime       time.Duration // spent naming and building the last request
	Named           int           // locations of the last interval named anew (not kept from earlier ones)
	ModulesRead     int           // modules whose symbol tables were read for them
	SamplingSession []kevents.CPUStats
}

func (c *Config) defaults() error {
	if c.RateHz == 0 {
		c.RateHz = 97
	}
	if c.RateHz < 1 || c.RateHz > 10000 {
		return fmt.Errorf("rate %d Hz: use 1 to 10000 (19 or 97 for continuous profiling)", c.RateHz)
	}
	if c.Interval == 0 {
		c.Interval = 15 * time.Second
	}
	if c.Interval < 100*time.Millisecond {
		return fmt.Errorf("interval %v: use at least 100ms (10s to 60s is usual)", c.Interval)
	}
	if c.StackBytes == 0 {
		c.StackBytes = 8192
	}
	if c.EventQueue <= 0 {
		c.EventQueue = 16384
		if c.OffCPU || c.Interrupts {
			c.EventQueue = 131072
		}
	}
	if c.Refresh <= 0 {
		c.Refresh = 10 * time.Minute
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	return nil
}

// applyPeriod is how often the aggregator reads the rings and applies
// the records, at least (sooner when the event queue is a quarter full):
// each wake-up of the agent costs a little CPU of its own and of the Go
// runtime's monitor thread (which polls every 20 us for a while after the
// process wakes: some 50 times a wake-up), which at a low sampling rate is
// most of the agent's cost.
const applyPeriod = 5 * time.Second

// readerPoll is the longest the sampler's own reader waits
// (kevents.Options.Poll): the aggregator reads the rings itself every
// applyPeriod, so the reader wakes only for a ring a quarter full (a
// burst of records).
const readerPoll = time.Minute

// maxExited bounds the processes gone whose tables are kept: past it the
// process tables start anew from /proc at the end of the interval (the
// name tables keep a process until they start anew, and a node that
// starts many short-lived processes, such as a build machine, would
// otherwise keep every one until the next refresh).
const maxExited = 4096

// Agent is a running continuous profiler.
type Agent struct {
	cfg  Config
	exp  *otlpexport.Exporter
	sess *kevents.Session
	sink *sink
	agg  *aggregator
	nm   *namer
	b    builder

	// losses is the records lost by the kernel or dropped by the full
	// queue as of the last interval.
	losses uint64

	mu sync.Mutex
	st Stats
}

// Start checks cfg, connects the exporter and starts sampling.
func Start(cfg Config) (*Agent, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	exp, err := otlpexport.New(cfg.Export)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, exp: exp, sink: newSink(cfg.EventQueue)}
	// Samples alone: 2 MiB rings, a quarter of which wakes the reader. At
	// 97 Hz a CPU writes some 25-50 KB of stacks and process records a
	// second: the aggregator's read every applyPeriod comes first, and
	// the agent wakes once per period, not also for each ring passing
	// its watermark. The other records have sizes of their own.
	opts := kevents.Options{RateHz: cfg.RateHz, Callstack: true, MaxStack: cfg.MaxStack, CPUs: cfg.CPUs,
		RingPages: 128, Poll: readerPoll}
	if !cfg.DWARF && !cfg.OffCPU && !cfg.Interrupts {
		opts.RingPages = 512
	}
	if cfg.DWARF {
		opts.Unwind = control.Unwind{DWARF: true, StackBytes: cfg.StackBytes}
		opts.RingPages = 512
	}
	if cfg.OffCPU {
		// A record per switch and a stack per wait: 4 MB rings (8 MB
		// with stack copies) hold thousands of switches a CPU between
		// two reads.
		opts.Dispatch, opts.SwitchStacks = true, true
		opts.RingPages *= 8
	}
	if cfg.Interrupts {
		// A record per switch and two per handler.
		opts.Dispatch, opts.Interrupt = true, true
		if !cfg.OffCPU {
			opts.RingPages *= 8
		}
		a.sink.intr, a.sink.noWaits = newIntrTracker(), !cfg.OffCPU
	}
	a.sess, err = kevents.Start(opts, a.sink)
	if err != nil {
		_ = exp.Close()
		return nil, fmt.Errorf("start sampling: %w", err)
	}
	// The records of processes started from here on wait in the queue;
	// the scan of /proc comes first.
	a.agg = newAggregator(cfg.Limits, cfg.Idle, cfg.OffCPU, uint64(time.Now().UnixNano()))
	a.nm = newNamer(cfg.CacheDir, cfg.Refresh)
	a.b = builder{res: a.agg.res, host: cfg.Host, version: cfg.Version, periodNS: int64(1e9 / cfg.RateHz), services: cfg.Services}
	return a, nil
}

// Run aggregates and exports until ctx ends; then it stops sampling,
// exports the last (partial) interval and gives the exporter up to
// flushTimeout to deliver what is queued (the rest stays in the spool).
func (a *Agent) Run(ctx context.Context, flushTimeout time.Duration) error {
	ectx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.exp.Run(ectx) }()

	tick := time.NewTicker(a.cfg.Interval)
	defer tick.Stop()
	// The rings are read and the sampler's records taken once per
	// applyPeriod on this goroutine, or when the queue is a quarter full:
	// one wake-up of the agent for each batch of them. Those older than
	// the reorder window are applied (all the rings have been read past
	// them).
	apply := time.NewTicker(applyPeriod)
	defer apply.Stop()
	ro := reorder{max: a.cfg.EventQueue}
	var in batch
	take := func() {
		a.sink.take(&in)
		ro.add(&in)
	}
	handle := a.agg.handle
	lastRefresh := time.Now()
	var err error
loop:
	for {
		select {
		case <-apply.C:
			ro.release(a.drain(take), handle)
		case <-a.sink.notify:
			ro.release(a.drain(take), handle)
		case now := <-tick.C:
			cutoff := a.drain(take)
			ro.release(cutoff, handle)
			a.endInterval(uint64(now.UnixNano()), cutoff)
			refresh := time.Since(lastRefresh) >= a.cfg.Refresh
			if refresh || a.agg.exited > maxExited {
				a.agg.reset()
				a.b.res = a.agg.res
			}
			if refresh {
				a.nm.reset()
				lastRefresh = time.Now()
			}
			// The interval's tables and request are garbage now: collected
			// here, the next interval reuses their pages. (Returned to the
			// system each interval, they were faulted in again by the next
			// one; the runtime's scavenger returns what stays unused.)
			runtime.GC()
		case <-ctx.Done():
			break loop
		}
	}
	err = a.sess.Stop()
	a.sink.flushAll()
	take()
	ro.release(^uint64(0), handle)
	a.endInterval(uint64(time.Now().UnixNano()), monoNow())
	cancel()
	wg.Wait()
	fctx, fcancel := context.WithTimeout(context.Background(), flushTimeout)
	a.exp.Flush(fctx)
	fcancel()
	if cerr := a.exp.Close(); err == nil {
		err = cerr
	}
	return err
}

// drain takes the records the session has read into the reorder buffer
// (take) and returns the time up to which they may be applied: those older
// than the reorder window, and none stamped at or after a record the
// session still holds back (a CPU's records wait behind a sample whose
// call-frame table is loading, for seconds on a busy machine, while its
// process records do not: applied before the held ones, an exit or
// another CPU's later switch-in would come before the switch-out it
// follows). The hold is read before the rings are drained (records held
// then, written to the sink meanwhile) and after the first take (records
// read by this drain and held); a second take gets what left the hold in
// between.
func (a *Agent) drain(take func()) uint64 {
	held1, ok1 := a.sess.HeldSince()
	a.sess.Flush()
	take()
	held2, ok2 := a.sess.HeldSince()
	take()
	cutoff := monoNow() - uint64(reorderWindow)
	if ok1 && held1 <= cutoff {
		cutoff = held1 - 1
	}
	if ok2 && held2 <= cutoff {
		cutoff = held2 - 1
	}
	return cutoff
}

// endInterval names and exports the interval that ends now (nowNS on the
// wall clock, recordsEnd on the records' clock: the records applied are
// those up to it).
func (a *Agent) endInterval(nowNS, recordsEnd uint64) {
	t0 := time.Now()
	if a.agg.off != nil {
		a.agg.endWaits(recordsEnd)
	}
	iv := a.agg.rotate(nowNS)
	if l := a.sink.lost.Load() + a.sink.dropped.Load(); l != a.losses {
		// An exit or exec may be among the records lost: the processes'
		// /proc information is read anew.
		a.losses = l
		a.agg.infos.forgetAll()
	}
	var samples int64
	if len(iv.order) > 0 || len(iv.offOrder) > 0 || len(iv.intrOrder) > 0 {
		p, n := a.b.build(iv, a.nm.nameAll(a.agg.res, iv.locs), nowNS)
		samples = n
		a.mu.Lock()
		a.st.Requests++
		a.mu.Unlock()
		if err := a.exp.Enqueue(p, n); err != nil && a.cfg.Log != nil {
			a.cfg.Log("continuous: %v", err)
		}
	}
	procs, dropped, offNS, offDropped, intrNS, intrDropped := len(iv.procs), iv.dropped, iv.offNS, iv.offDropped, iv.intrNS, iv.intrDropped
	a.agg.recycle(iv)
	a.mu.Lock()
	st := &a.st
	st.Intervals++
	st.Samples = samples
	st.TotalSamples += samples
	st.Dropped += dropped
	st.OffCPU = time.Duration(offNS)
	st.TotalOffCPU += time.Duration(offNS)
	st.OffCPUDropped += time.Duration(offDropped + intrDropped)
	st.Interrupt = time.Duration(intrNS)
	st.TotalInterrupt += time.Duration(intrNS)
	if a.agg.off != nil {
		st.UnstackedWaits = a.agg.off.unstacked
	}
	st.Idle = a.agg.idleCount
	st.EventsDropped = a.sink.dropped.Load()
	st.Lost = a.sink.lost.Load()
	st.Processes = procs
	st.Export = a.exp.Stats()
	st.CPU, st.MaxRSS = selfUsage()
	st.BuildTime = time.Since(t0)
	st.Named, st.ModulesRead = a.nm.named, a.nm.modulesRead
	st.SamplingSession = a.sess.Stats()
	cp := *st
	a.mu.Unlock()
	if a.cfg.Log != nil {
		off := ""
		if a.agg.off != nil {
			off = fmt.Sprintf(", %v off-CPU (%d waits without a stack)", cp.OffCPU.Round(time.Millisecond), cp.UnstackedWaits)
		}
		if a.cfg.Interrupts {
			off += fmt.Sprintf(", %v in interrupts", cp.Interrupt.Round(time.Microsecond))
		}
		if a.agg.off != nil || a.cfg.Interrupts {
			off += fmt.Sprintf(" (%v over the limits)", cp.OffCPUDropped.Round(time.Millisecond))
		}
		a.cfg.Log("interval %d: %d samples of %d processes%s, %d dropped over the limits, %d records dropped, %d lost by the kernel; export: %d sent (%d samples, %d bytes), %d queued (%d on disk), %d dropped (%d samples), %d failed attempts%s; %d locations named anew from %d modules; agent CPU %v, max RSS %d MiB",
			cp.Intervals, cp.Samples, cp.Processes, off, cp.Dropped, cp.EventsDropped, cp.Lost,
			cp.Export.Sent, cp.Export.SentSamples, cp.Export.SentBytes, cp.Export.Queued, cp.Export.Spooled,
			cp.Export.Dropped, cp.Export.DroppedSamples, cp.Export.Failures, lastErr(cp.Export.LastError),
			cp.Named, cp.ModulesRead, cp.CPU.Round(time.Millisecond), cp.MaxRSS>>20)
	}
	if a.cfg.OnInterval != nil {
		a.cfg.OnInterval(cp)
	}
}

func lastErr(s string) string {
	if s == "" {
		return ""
	}
	return " (last error: " + s + ")"
}

// Stats returns the counts as of the last interval.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.st
	st.Export = a.exp.Stats()
	return st
}

// selfUsage is the process's CPU time and maximum resident set.
func selfUsage() (time.Duration, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpu, ru.Maxrss * 1024
}

// ErrNotRoot is returned when the agent cannot open system-wide events.
var ErrNotRoot = errors.New("continuous profiling samples every CPU: run pitraced continuous as root (or with CAP_PERFMON)")
