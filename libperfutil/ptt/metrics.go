package ptt

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/events"
	"perfinsp/libperfutil/kmodbackend"
)

// MaxMetrics is the most metrics one PttInit can ask for (as in PI).
const MaxMetrics = 8

// Metric describes one metric PTT can virtualize.
// perfTypeModule marks metrics only the pitrace module keeps.
const perfTypeModule = 0xffffffff

type Metric struct {
	Name     string `json:"name"`
	Unit     string `json:"unit"`
	Hardware bool   `json:"hardware"` // needs a hardware PMU counter
	Help     string `json:"help"`
	perfType uint32
	config   uint64
}

// pttEvents are the perf events PTT accepts as metrics, by their name in
// the project's one event table (libperfutil/events), in listing order; the
// C library (libperfutil/c/ptt.c) accepts the same names (tested).
var pttEvents = []string{
	"task-clock", "cpu-clock", "context-switches", "cpu-migrations", "page-faults", "minor-faults", "major-faults",
	"cycles", "instructions", "branches", "branch-misses", "cache-references", "cache-misses", "ref-cycles",
}

// pttHelp overrides an event's help where PTT's meaning is narrower.
var pttHelp = map[string]string{
	"task-clock":       "CPU time of the thread (no-module backend only: use tsc or cpu-clock on the module)",
	"cpu-clock":        "CPU time of the thread (cpu-clock timer)",
	"context-switches": "times the thread was switched out",
	"cpu-migrations":   "times the thread moved to another CPU",
	"page-faults":      "page faults taken by the thread",
}

var metricTable = buildMetricTable()

func buildMetricTable() []Metric {
	t := []Metric{{Name: "tsc", Unit: "cycles", Help: "time stamp counter cycles of the thread, interrupts factored out (pitrace module only; instructions under QEMU -icount)", perfType: perfTypeModule}}
	for _, n := range pttEvents {
		e, ok := events.Lookup(n)
		if !ok {
			continue // TestMetricsFromEventTable fails on this
		}
		help := e.Help
		if h, ok := pttHelp[n]; ok {
			help = h
		}
		t = append(t, Metric{Name: e.Name, Unit: e.Unit, Hardware: e.Hardware, Help: help, perfType: e.Type, config: e.Config})
	}
	return t
}

// Metrics lists every metric name PttInit accepts, in table order.
func Metrics() []Metric {
	out := make([]Metric, len(metricTable))
	copy(out, metricTable)
	return out
}

// MetricNames lists the valid metric names, sorted.
func MetricNames() []string {
	names := make([]string, 0, len(metricTable))
	for _, m := range metricTable {
		names = append(names, m.Name)
	}
	sort.Strings(names)
	return names
}

// LookupMetric finds a metric by name (case-insensitive; "instr" style
// aliases of perf are accepted for the common ones).
func LookupMetric(name string) (Metric, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	if e, ok := events.Lookup(n); ok {
		n = e.Name // perf's aliases: cs, faults, migrations, cpu-cycles, branch-instructions
	}
	for _, m := range metricTable {
		if m.Name == n {
			return m, nil
		}
	}
	return Metric{}, fmt.Errorf("unknown metric %q: valid metrics are %s", name, strings.Join(MetricNames(), ", "))
}

// DefaultMetric is the metric used when none is given: tsc on the module
// backend ("kmod"), task-clock on the others.
func DefaultMetric(backend string) string {
	if backend == "kmod" {
		return "tsc"
	}
	return "task-clock"
}

// ParseMetrics validates a metric list: 1 to 8 known, distinct names. An
// empty list means task-clock (DefaultMetric of the no-module backend).
func ParseMetrics(names []string) ([]Metric, error) {
	if len(names) == 0 {
		names = []string{DefaultMetric("daemon")}
	}
	if len(names) > MaxMetrics {
		return nil, fmt.Errorf("%d metrics requested: PTT supports at most %d at once", len(names), MaxMetrics)
	}
	out := make([]Metric, 0, len(names))
	seen := map[string]bool{}
	for _, n := range names {
		m, err := LookupMetric(n)
		if err != nil {
			return nil, err
		}
		if seen[m.Name] {
			return nil, fmt.Errorf("metric %s given twice", m.Name)
		}
		seen[m.Name] = true
		out = append(out, m)
	}
	return out, nil
}

// ModuleMetrics maps metrics to the pitrace module's PTT metrics: tsc is
// the TSC, every other metric a per-CPU perf_event counter the module reads
// at each dispatch and interrupt. task-clock cannot be a per-CPU counter
// (the kernel keeps it per task) and is refused with what to use instead. A
// hardware metric on a machine without a PMU fails with ErrNoPMU.
func ModuleMetrics(ms []Metric) ([]kmodbackend.PttMetric, error) {
	if len(ms) < 1 || len(ms) > MaxMetrics {
		return nil, fmt.Errorf("%d metrics requested: PTT supports 1 to %d at once", len(ms), MaxMetrics)
	}
	out := make([]kmodbackend.PttMetric, 0, len(ms))
	for _, m := range ms {
		switch {
		case m.perfType == perfTypeModule:
			out = append(out, kmodbackend.PttMetric{Kind: kmodbackend.PttKindTSC})
			continue
		case m.perfType == unix.PERF_TYPE_SOFTWARE && m.config == unix.PERF_COUNT_SW_TASK_CLOCK:
			return nil, fmt.Errorf("metric task-clock is not available on the pitrace module (kmod backend): the kernel keeps it per task, "+
				"and the module reads per-CPU counters at every dispatch; use tsc (TSC cycles, interrupts factored out) or cpu-clock (ns), "+
				"or the daemon backend (%s=daemon: perf events) for task-clock", EnvBackend)
		case m.Hardware && !HasPMU():
			return nil, fmt.Errorf("%w: metric %s needs a hardware counter", ErrNoPMU, m.Name)
		}
		out = append(out, kmodbackend.PttMetric{Kind: kmodbackend.PttKindPerf, Type: m.perfType, Config: m.config})
	}
	return out, nil
}

// ModuleInit selects metrics ms for the /dev/pitrace file fd (PTT_INIT),
// with errors a user can act on.
func ModuleInit(fd int, ms []Metric) error {
	km, err := ModuleMetrics(ms)
	if err != nil {
		return err
	}
	err = kmodbackend.PttInit(fd, km)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENODEV) {
		var names []string
		for _, m := range ms {
			if m.Hardware {
				if !HasPMU() {
					return fmt.Errorf("%w: metric %s needs a hardware counter", ErrNoPMU, m.Name)
				}
				names = append(names, m.Name)
			}
		}
		if len(names) > 0 {
			return fmt.Errorf("the pitrace module cannot count %s on every CPU (the hardware PMU does not provide it): %w", strings.Join(names, ", "), err)
		}
		return fmt.Errorf("the pitrace module cannot create a per-CPU counter for these metrics: %w", err)
	}
	if errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("the pitrace module keeps at most %d distinct perf counters for all PTT users at once, or this file's areas are still alive: %w", kmodbackend.PttMaxSlots, err)
	}
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
		return fmt.Errorf("the loaded pitrace module refuses these metrics (an older module keeps tsc only: rebuild and reload kmod/pitrace.ko): %w", err)
	}
	return err
}

// SplitList splits "a,b c" into names.
func SplitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}
