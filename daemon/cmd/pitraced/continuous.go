package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"perfinsp/daemon/continuous"
	"perfinsp/daemon/otlpexport"
	"perfinsp/internal/cliutil"
)

// continuousCommand is `pitraced continuous`: the agent as a continuous,
// system-wide profiler exporting OTLP profiles (docs/continuous.md).
func continuousCommand() *cli.Command {
	return &cli.Command{
		Name:      "continuous",
		Usage:     "profile every CPU continuously and export OTLP profiles to a collector",
		UsageText: "pitraced continuous --endpoint URL|HOST:PORT [options]   (or: pitraced continuous --config FILE)",
		Description: "Samples every CPU at --rate with call stacks, names the frames on this node (symbols of\n" +
			"ELF files, JIT perf maps, the kernel's), and sends one OTLP profiles request per --interval to\n" +
			"the collector at --endpoint (OTLP/HTTP at /v1development/profiles, or OTLP/gRPC). While the\n" +
			"collector is down, profiles wait in --queue-bytes of memory, then in --spool-dir; what does\n" +
			"not fit is dropped and counted. One log line per interval reports the counts and the agent's\n" +
			"own CPU and memory. The endpoint is only ever the one configured here (flags or a root-owned\n" +
			"--config file); the control socket is not opened in this mode.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "read settings from `FILE`: name = value lines, the names of these flags (a flag given on the command line wins); root-owned, not writable by others"},
			&cli.StringFlag{Name: "endpoint", Usage: "the collector: http(s)://HOST:PORT[/PATH] for OTLP/HTTP, HOST:PORT for gRPC"},
			&cli.StringFlag{Name: "protocol", Value: "http", Usage: "http or grpc"},
			&cli.BoolFlag{Name: "insecure", Usage: "gRPC without TLS"},
			&cli.StringFlag{Name: "ca-file", Usage: "verify the collector's certificate with the PEM `FILE` (default: the system's roots)"},
			&cli.StringSliceFlag{Name: "header", Usage: "add `NAME=VALUE` to every request (repeatable)"},
			&cli.StringFlag{Name: "bearer-token-file", Usage: "send Authorization: Bearer with the token in `FILE` (root-owned, not readable by others)"},
			&cli.IntFlag{Name: "rate", Value: 97, Usage: "samples per second of CPU time on each CPU"},
			&cli.DurationFlag{Name: "interval", Value: 15 * time.Second, Usage: "one profile per process per interval"},
			&cli.StringFlag{Name: "unwind", Value: "fp", Usage: "user stacks by frame pointers (fp) or by call-frame information (dwarf: a copy of --stack-bytes of the stack per sample)"},
			&cli.IntFlag{Name: "stack-bytes", Value: 8192, Usage: "user stack copied per sample with --unwind dwarf"},
			&cli.IntFlag{Name: "max-stack", Value: 127, Usage: "frames per stack"},
			&cli.BoolFlag{Name: "idle", Usage: "keep the idle task's samples (swapper)"},
			&cli.BoolFlag{Name: "off-cpu", Usage: "record the scheduler's switches too and export each thread's time off the CPU (sleeping or blocked) under the stack it waited in: a second profile per process, sample type off_cpu in nanoseconds"},
			&cli.BoolFlag{Name: "interrupts", Usage: "record hard-interrupt and softirq handlers too and export their time charged to the threads they interrupted, one frame per handler (softirq NET_RX, hardirq 24 ...): a profile per process, sample type interrupt in nanoseconds"},
			&cli.IntFlag{Name: "max-stacks", Value: 20000, Usage: "distinct (thread, stack) pairs kept per interval (past it samples are dropped and counted)"},
			&cli.StringFlag{Name: "queue-bytes", Value: "16M", Usage: "memory for profiles waiting to be sent (K, M, G suffixes)"},
			&cli.StringFlag{Name: "spool-dir", Usage: "keep profiles the memory queue cannot hold in `DIR` (mode 0700), delivered when the collector is back, also after a restart"},
			&cli.StringFlag{Name: "spool-bytes", Value: "256M", Usage: "bound of --spool-dir"},
			&cli.StringSliceFlag{Name: "service", Usage: "service.name of the processes of an executable: `EXE=SERVICE` (repeatable; a process's OTEL_SERVICE_NAME wins)"},
			&cli.StringFlag{Name: "host-name", Usage: "host.name (default: this machine's host name)"},
			&cli.StringFlag{Name: "symbol-cache", Value: "/var/cache/perfinsp/a2n", Usage: "keep parsed symbol tables in `DIR` (\"\": none)"},
			&cli.StringFlag{Name: "memory-limit", Value: "48M", Usage: "soft limit of the agent's Go heap: the garbage collector runs when the heap has grown 5-fold since the last collection or nears this limit (GOMEMLIMIT and GOGC in the environment win)"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "bound of one request"},
			&cli.DurationFlag{Name: "duration", Usage: "stop after this long (0: run until SIGTERM or SIGINT)"},
			&cli.BoolFlag{Name: "quiet", Usage: "no line per interval (errors only)"},
			// The agent's own CPU profile (Go's pprof format), for the
			// work on its cost.
			&cli.StringFlag{Name: "cpuprofile", Hidden: true, Usage: "write the agent's own CPU profile (pprof) to `FILE`"},
			&cli.StringFlag{Name: "memprofile", Hidden: true, Usage: "write the agent's own allocation profile (pprof) to `FILE` at its stop"},
		},
		Action: runContinuous,
	}
}

func parseBytes(name, s string) (int64, error) {
	mult := int64(1)
	t := strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(s)), "B")
	switch {
	case strings.HasSuffix(t, "K"):
		mult, t = 1<<10, t[:len(t)-1]
	case strings.HasSuffix(t, "M"):
		mult, t = 1<<20, t[:len(t)-1]
	case strings.HasSuffix(t, "G"):
		mult, t = 1<<30, t[:len(t)-1]
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--%s %q: give a size such as 16M", name, s)
	}
	return n * mult, nil
}

func pairs(name string, vals []string) (map[string]string, error) {
	m := map[string]string{}
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("--%s %q: want NAME=VALUE", name, v)
		}
		m[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return m, nil
}

// applyConfigFile sets the flags the command line left unset from --config.
func applyConfigFile(c *cli.Context) error {
	path := c.String("config")
	if path == "" {
		return nil
	}
	settings, err := continuous.ReadConfigFile(path)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, f := range c.Command.Flags {
		for _, n := range f.Names() {
			known[n] = true
		}
	}
	for _, s := range settings {
		if !known[s.Name] || s.Name == "config" {
			return fmt.Errorf("%s:%d: unknown setting %q (the settings are the flags of pitraced continuous --help)", path, s.Line, s.Name)
		}
		if c.IsSet(s.Name) {
			continue
		}
		if err := c.Set(s.Name, s.Value); err != nil {
			return fmt.Errorf("%s:%d: %s: %w", path, s.Line, s.Name, err)
		}
	}
	return nil
}

func continuousConfig(c *cli.Context) (continuous.Config, error) {
	var cfg continuous.Config
	if err := applyConfigFile(c); err != nil {
		return cfg, err
	}
	if c.String("endpoint") == "" {
		return cfg, fmt.Errorf("no collector: give --endpoint (http://HOST:4318 or, with --protocol grpc, HOST:4317) or a --config file naming one")
	}
	headers, err := pairs("header", c.StringSlice("header"))
	if err != nil {
		return cfg, err
	}
	if tf := c.String("bearer-token-file"); tf != "" {
		tok, err := readSecret(tf)
		if err != nil {
			return cfg, err
		}
		headers["Authorization"] = "Bearer " + tok
	}
	services, err := pairs("service", c.StringSlice("service"))
	if err != nil {
		return cfg, err
	}
	qb, err := parseBytes("queue-bytes", c.String("queue-bytes"))
	if err != nil {
		return cfg, err
	}
	sb, err := parseBytes("spool-bytes", c.String("spool-bytes"))
	if err != nil {
		return cfg, err
	}
	switch c.String("unwind") {
	case "fp":
	case "dwarf":
		cfg.DWARF = true
	default:
		return cfg, fmt.Errorf("--unwind %q: use fp or dwarf", c.String("unwind"))
	}
	cfg.RateHz = c.Int("rate")
	cfg.Interval = c.Duration("interval")
	cfg.StackBytes = c.Int("stack-bytes")
	cfg.MaxStack = c.Int("max-stack")
	cfg.Idle = c.Bool("idle")
	cfg.OffCPU = c.Bool("off-cpu")
	cfg.Interrupts = c.Bool("interrupts")
	cfg.Limits.Stacks = c.Int("max-stacks")
	cfg.Host = c.String("host-name")
	cfg.Services = services
	cfg.CacheDir = c.String("symbol-cache")
	cfg.Version = cliutil.Version()
	cfg.Export = otlpexport.Config{Protocol: c.String("protocol"), Endpoint: c.String("endpoint"), Insecure: c.Bool("insecure"),
		CAFile: c.String("ca-file"), Headers: headers, Timeout: c.Duration("timeout"),
		QueueBytes: qb, SpoolDir: c.String("spool-dir"), SpoolBytes: sb}
	return cfg, nil
}

// startCPUProfile starts Go's CPU profile of the agent into a new file at
// path; the function returned ends it.
func startCPUProfile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w (give a new file)", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "pitraced: --cpuprofile: %v\n", err)
		}
	}, nil
}

// readSecret reads a token file that only its owner (root, or the user
// running the agent) may read.
func readSecret(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("bearer token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("bearer token file: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || !ok || (st.Uid != 0 && int(st.Uid) != os.Geteuid()) || fi.Mode().Perm()&0o077 != 0 || fi.Size() > 16<<10 {
		return "", fmt.Errorf("bearer token file %s must be a regular file of root's, readable by no one else (chmod 600), at most 16 KiB", path)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return "", fmt.Errorf("bearer token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("bearer token file %s: want one line holding the token", path)
	}
	return tok, nil
}

func runContinuous(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (see pitraced continuous --help)", c.Args().First())
	}
	cfg, err := continuousConfig(c)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return continuous.ErrNotRoot
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		lim, err := parseBytes("memory-limit", c.String("memory-limit"))
		if err != nil {
			return err
		}
		debug.SetMemoryLimit(lim)
	}
	if os.Getenv("GOGC") == "" {
		// The heap is bounded by the limit above (and given back at
		// the end of each interval): collections as the heap grows
		// 5-fold, not 2-fold, are fewer for the same bound.
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// The agent's work is one goroutine's at a time (the reader's
		// drains, the aggregator, the exporter's sends): with more Ps
		// the runtime wakes another thread to look for work at each
		// wake-up of the agent, and its collections run on every CPU.
		runtime.GOMAXPROCS(1)
	}
	logger := log.New(os.Stderr, "pitraced: ", log.LstdFlags)
	if !c.Bool("quiet") {
		cfg.Log = logger.Printf
	}
	if p := c.String("cpuprofile"); p != "" {
		stopProfile, err := startCPUProfile(p)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	if p := c.String("memprofile"); p != "" {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return fmt.Errorf("--memprofile: %w (give a new file)", err)
		}
		defer func() {
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				logger.Printf("--memprofile: %v", err)
			}
			f.Close()
		}()
	}
	a, err := continuous.Start(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if d := c.Duration("duration"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	if cfg.Log != nil {
		off := ""
		if cfg.OffCPU {
			off = " and off-CPU time"
		}
		if cfg.Interrupts {
			off += " and interrupt time"
		}
		cfg.Log("continuous profiling at %d Hz%s, one profile per process every %v, to %s over %s (pid %d)",
			cfg.RateHz, off, cfg.Interval, cfg.Export.Endpoint, cfg.Export.Protocol, os.Getpid())
	}
	err = a.Run(ctx, 5*time.Second)
	st := a.Stats()
	last := ""
	if st.Export.LastError != "" {
		last = " (last export error: " + st.Export.LastError + ")"
	}
	logger.Printf("continuous: stopped after %d intervals: %d samples, %d sent in %d requests (%d bytes), %d samples dropped by the exporter and %d over the limits, %d requests left queued (%d on disk)%s; agent CPU %v, max RSS %d MiB",
		st.Intervals, st.TotalSamples, st.Export.SentSamples, st.Export.Sent, st.Export.SentBytes, st.Export.DroppedSamples, st.Dropped,
		st.Export.Queued, st.Export.Spooled, last, st.CPU.Round(time.Millisecond), st.MaxRSS>>20)
	return err
}
