package ptt

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/kmodbackend"
)

func mustParse(t *testing.T, names ...string) []Metric {
	t.Helper()
	ms, err := ParseMetrics(names)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func TestModuleMetricMapping(t *testing.T) {
	km, err := ModuleMetrics(mustParse(t, "tsc", "cpu-clock", "context-switches", "cpu-migrations", "page-faults", "minor-faults", "major-faults"))
	if err != nil {
		t.Fatal(err)
	}
	want := []kmodbackend.PttMetric{
		{Kind: kmodbackend.PttKindTSC},
		{Kind: kmodbackend.PttKindPerf, Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK},
		{Kind: kmodbackend.PttKindPerf, Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CONTEXT_SWITCHES},
		{Kind: kmodbackend.PttKindPerf, Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_MIGRATIONS},
		{Kind: kmodbackend.PttKindPerf, Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_PAGE_FAULTS},
		{Kind: kmodbackend.PttKindPerf, Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_PAGE_FAULTS_MIN},
		{Kind: kmodbackend.PttKindPerf, Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ},
	}
	if len(km) != len(want) {
		t.Fatalf("%d module metrics, want %d", len(km), len(want))
	}
	for i := range want {
		if km[i] != want[i] {
			t.Errorf("metric %d: %+v, want %+v", i, km[i], want[i])
		}
	}
	hw, err := ModuleMetrics(mustParse(t, "tsc", "instructions"))
	if HasPMU() {
		if err != nil || hw[1] != (kmodbackend.PttMetric{Kind: kmodbackend.PttKindPerf, Type: unix.PERF_TYPE_HARDWARE, Config: unix.PERF_COUNT_HW_INSTRUCTIONS}) {
			t.Errorf("instructions on a machine with a PMU: %+v %v", hw, err)
		}
	} else {
		want := "no hardware PMU on this machine: metric instructions needs a hardware counter"
		if err == nil || err.Error() != want || !errors.Is(err, ErrNoPMU) {
			t.Errorf("instructions without a PMU: got %v, want %q", err, want)
		}
	}
}

func TestTaskClockRefusedOnModule(t *testing.T) {
	_, err := ModuleMetrics(mustParse(t, "tsc", "task-clock"))
	if err == nil {
		t.Fatal("task-clock mapped to a per-CPU module counter")
	}
	for _, w := range []string{"task-clock", "tsc", "cpu-clock", "daemon"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the task-clock error does not name %s: %v", w, err)
		}
	}
	t.Logf("task-clock on kmod: %v", err)
}

func TestUnknownMetricBeforeBackend(t *testing.T) {
	for _, be := range []string{"kmod", "perf", "daemon", "auto"} {
		t.Setenv(EnvBackend, be)
		err := Init("tsc", "bogus")
		if err == nil {
			_ = Terminate()
			t.Fatalf("backend %s: unknown metric accepted", be)
		}
		if !strings.Contains(err.Error(), `unknown metric "bogus"`) || !strings.Contains(err.Error(), "tsc") {
			t.Errorf("backend %s: %v", be, err)
		}
	}
}

func TestDefaultMetric(t *testing.T) {
	if DefaultMetric("kmod") != "tsc" || DefaultMetric("daemon") != "task-clock" {
		t.Errorf("defaults: kmod %s, daemon %s", DefaultMetric("kmod"), DefaultMetric("daemon"))
	}
	if _, err := unix.Open(devPitrace, unix.O_RDWR, 0); err == nil {
		t.Skip("the pitrace module is loaded here")
	}
	t.Setenv(EnvBackend, "")
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	defer Terminate()
	if a := Active(); len(a) != 1 || a[0].Name != "task-clock" {
		t.Errorf("default without the module: %+v", a)
	}
}

func TestModuleGuarantees(t *testing.T) {
	g := ModuleGuarantees(mustParse(t, "tsc", "page-faults"), 0x7)
	if !g.InterruptsFactoredOut || !g.NoSyscallRead || !g.DispatchCounts || g.Backend != "kmod" || len(g.Metrics) != 2 {
		t.Fatalf("%+v", g)
	}
	if !strings.Contains(g.Metrics[0].Path, "current to the instant") {
		t.Errorf("tsc path: %s", g.Metrics[0].Path)
	}
	if !strings.Contains(g.Metrics[1].Path, "current to the thread's last dispatch/interrupt") {
		t.Errorf("page-faults path: %s", g.Metrics[1].Path)
	}
	if !strings.Contains(strings.Join(g.Notes, "\n"), "last dispatch/interrupt") {
		t.Errorf("notes: %v", g.Notes)
	}
}

// The module read on a work area built here: live = 0 gives accum as is,
// live = ~0 adds the TSC since last; Read2 retries on the sequence.
func TestModuleReadFormula(t *testing.T) {
	if !haveTSC {
		t.Skip("no rdtsc on this architecture")
	}
	var a kmodbackend.PttArea
	a.NMetrics = 2
	a.Accum[0], a.Accum[1] = 1000, 1234
	a.Last[0], a.Last[1] = rdtsc(), 99999
	a.Live[0], a.Live[1] = ^uint64(0), 0
	th := &Thread{metrics: mustParse(t, "tsc", "page-faults"), lock: unsafe.Pointer(&a.Seq)}
	th.c = make([]counter, 2)
	for i := range th.c {
		th.c[i] = counter{kind: kindModule, fd: -1, page: unsafe.Pointer(&a), mask: uint64(i)}
	}
	th.pickReader()
	tsc, pf, err := th.Read2()
	if err != nil {
		t.Fatal(err)
	}
	if pf != 1234 {
		t.Errorf("perf metric (live 0): %d, want accum 1234", pf)
	}
	if tsc <= 1000 || tsc-1000 > 1<<32 {
		t.Errorf("tsc metric (live ~0): %d, want accum 1000 plus a little", tsc)
	}
	vals := make([]uint64, 2)
	if err := th.Read(vals); err != nil || vals[1] != 1234 || vals[0] < tsc {
		t.Errorf("Read: %v %v (tsc before %d)", vals, err, tsc)
	}
}
