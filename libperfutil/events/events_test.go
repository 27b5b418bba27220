package events

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestNamedEvents(t *testing.T) {
	cases := []struct {
		in       string
		name     string
		typ      uint32
		config   uint64
		hardware bool
	}{
		{"cycles", "cycles", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES, true},
		{"CPU-Cycles", "cycles", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES, true},
		{"instructions", "instructions", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_INSTRUCTIONS, true},
		{"ref-cycles", "ref-cycles", unix.PERF_TYPE_HARDWARE, 9, true},
		{"branch-instructions", "branches", unix.PERF_TYPE_HARDWARE, 4, true},
		{"bus-cycles", "bus-cycles", unix.PERF_TYPE_HARDWARE, 6, true},
		{"task-clock", "task-clock", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_TASK_CLOCK, false},
		{"cs", "context-switches", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CONTEXT_SWITCHES, false},
		{"faults", "page-faults", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_PAGE_FAULTS, false},
		{"major-faults", "major-faults", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ, false},
		// perf's cache encoding: id | op<<8 | result<<16
		{"L1-dcache-load-misses", "L1-dcache-load-misses", unix.PERF_TYPE_HW_CACHE, 0x10000, true},
		{"LLC-stores", "LLC-stores", unix.PERF_TYPE_HW_CACHE, 0x102, true},
		{"dTLB-prefetch-misses", "dTLB-prefetch-misses", unix.PERF_TYPE_HW_CACHE, 0x10203, true},
		// raw
		{"r01c2", "r1c2", unix.PERF_TYPE_RAW, 0x1c2, true},
		{"rFFFFFFFFFFFFFFFF", "rffffffffffffffff", unix.PERF_TYPE_RAW, ^uint64(0), true},
	}
	for _, c := range cases {
		e, err := Parse(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if e.Name != c.name || e.Type != c.typ || e.Config != c.config || e.Hardware != c.hardware {
			t.Errorf("%s: got %s hardware=%v, want %s type %d config %#x hardware=%v", c.in, e, e.Hardware, c.name, c.typ, c.config, c.hardware)
		}
	}
}

func TestModifiers(t *testing.T) {
	e, err := Parse("cycles:u")
	if err != nil {
		t.Fatal(err)
	}
	if !e.ExcludeKernel || e.ExcludeUser || e.Config != 0 || e.Type != unix.PERF_TYPE_HARDWARE {
		t.Errorf("cycles:u = %+v", e)
	}
	a := e.Attr()
	if a.Bits&unix.PerfBitExcludeKernel == 0 || a.Bits&unix.PerfBitExcludeUser != 0 {
		t.Errorf("cycles:u attr bits %#x", a.Bits)
	}
	e, err = Parse("task-clock:k")
	if err != nil || !e.ExcludeUser || e.ExcludeKernel {
		t.Errorf("task-clock:k = %+v, %v", e, err)
	}
}

func TestSplitList(t *testing.T) {
	got := SplitList("cycles, cpu/event=0x3c,umask=1/,task-clock,,msr/tsc/ instructions")
	want := []string{"cycles", "cpu/event=0x3c,umask=1/", "task-clock", "msr/tsc/", "instructions"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("SplitList = %q, want %q", got, want)
	}
}

// Every syntax error names the bad token.
func TestErrorsNameTheToken(t *testing.T) {
	intel := Sysfs{Devices: "testdata/sysfs/intel-x86", Tracefs: []string{"testdata/tracefs"}}
	cases := []struct{ in, token, reason string }{
		{"cylces", "cylces", "unknown event"},
		{"rXYZ", "rXYZ", "raw event is r followed by"},
		{"r12345678901234567", "r12345678901234567", "raw event"},
		{"cpu/evnt=0x3c/", "evnt", "unknown term for PMU cpu"},
		{"cpu/event=0x3c,umask=0x100/", "umask=0x100", "does not fit the 8 bits"},
		{"cpu/event=zz/", "event=zz", "not a number"},
		{"cpu/event=0x3c", "cpu/event=0x3c", "closing / is missing"},
		{"nopmu/event=1/", "nopmu", "no such PMU"},
		{"cpu//", "cpu//", "no terms"},
		{"sched:no_such_event", "sched:no_such_event", "no such tracepoint"},
		{"", "", "empty event name"},
	}
	for _, c := range cases {
		_, err := intel.Parse(c.in)
		var pe *Error
		if !errors.As(err, &pe) {
			t.Errorf("%q: error %v is not an *Error", c.in, err)
			continue
		}
		if pe.Token != c.token || !strings.Contains(pe.Reason, c.reason) {
			t.Errorf("%q: token %q reason %q; want token %q reason containing %q", c.in, pe.Token, pe.Reason, c.token, c.reason)
		}
		if c.token != "" && !strings.Contains(err.Error(), c.token) {
			t.Errorf("%q: message %q does not name %q", c.in, err, c.token)
		}
	}
	// the unknown-term message lists the PMU's formats
	_, err := intel.Parse("cpu/evnt=1/")
	if err == nil || !strings.Contains(err.Error(), "cmask") || !strings.Contains(err.Error(), "umask") {
		t.Errorf("unknown term message does not list the formats: %v", err)
	}
	// a list fails on its bad item, named
	_, err = intel.ParseList("cycles,cpu/event=0x3c/,bogus")
	if err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("ParseList error %v does not name bogus", err)
	}
}

func TestParseFormat(t *testing.T) {
	f, err := ParseFormat("event", "config:0-7,32-35\n")
	if err != nil {
		t.Fatal(err)
	}
	if f.Field != 0 || len(f.Bits) != 12 || f.Bits[7] != 7 || f.Bits[8] != 32 || f.Bits[11] != 35 {
		t.Errorf("format = %+v", f)
	}
	for _, bad := range []string{"config", "cfg:0-7", "config:7-0", "config:64", "config:a-b", "config2:0-64"} {
		if _, err := ParseFormat("x", bad); err == nil {
			t.Errorf("ParseFormat(%q) accepted", bad)
		}
	}
}

// The decoding on copies of real sysfs trees (testdata/SOURCE.md).
func TestSysfsIntel(t *testing.T) {
	s := Sysfs{Devices: "testdata/sysfs/intel-x86"}
	if !s.HasPMU() {
		t.Error("intel tree: HasPMU false")
	}
	cases := []struct {
		in                string
		config, config1   uint64
		hardware          bool
		typ               uint32
		excludeK, exclude bool
	}{
		// INST_RETIRED.ANY_P
		{in: "cpu/event=0xc0/", config: 0xc0},
		// MEM_LOAD_RETIRED.L1_MISS: event 0xd1 umask 0x08
		{in: "cpu/event=0xd1,umask=0x08/", config: 0x08d1},
		// every flag of the Intel format: edge 18, pc 19, any 21, inv 23, cmask 24-31
		{in: "cpu/event=0xa3,umask=0x14,cmask=20,edge,inv,any,pc/", config: 0x14<<24 | 1<<23 | 1<<21 | 1<<19 | 1<<18 | 0x14<<8 | 0xa3},
		{in: "cpu/event=0x3c,in_tx=1,in_tx_cp=1/", config: 1<<33 | 1<<32 | 0x3c},
		// OFFCORE_RESPONSE with its MSR value in config1
		{in: "cpu/event=0xb7,umask=0x1,offcore_rsp=0x10003c0091/", config: 0x1b7, config1: 0x10003c0091},
		// aliases from cpu/events, with and without extra terms
		{in: "cpu/cpu-cycles/", config: 0x3c},
		{in: "cpu/cache-misses/", config: 0x412e},
		{in: "cpu/ref-cycles/", config: 0x0300},
		{in: "cpu/mem-loads/", config: 0x01cd, config1: 3},
		{in: "cpu/mem-loads,ldlat=30/", config: 0x01cd, config1: 30},
		{in: "cpu/cycles-ct/", config: 1<<33 | 1<<32 | 0x3c},
		// direct config terms
		{in: "cpu/config=0x5300c0,config1=7/", config: 0x5300c0, config1: 7},
	}
	for _, c := range cases {
		e, err := s.Parse(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if e.Type != 4 || e.Config != c.config || e.Config1 != c.config1 || !e.Hardware || e.Kind != KindPMU || e.PMU != "cpu" {
			t.Errorf("%s: got %s hw=%v kind %v, want type 4 config %#x config1 %#x", c.in, e, e.Hardware, e.Kind, c.config, c.config1)
		}
	}
	p, err := s.ReadPMU("cpu")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Formats) != 12 || p.Events["mem-loads"] != "event=0xcd,umask=0x1,ldlat=3" {
		t.Errorf("cpu PMU: %d formats, events %v", len(p.Formats), p.Events)
	}
	if _, ok := p.Events["mem-loads.unit"]; ok {
		t.Error("events/mem-loads.unit taken as an event")
	}
}

func TestSysfsAMDSplitEventSelect(t *testing.T) {
	s := Sysfs{Devices: "testdata/sysfs/amd-x86"}
	// event 0x1c0 does not fit 8 bits: its bit 8 goes to config bit 32
	e, err := s.Parse("cpu/event=0x1c0,umask=0x3/")
	if err != nil {
		t.Fatal(err)
	}
	if e.Config != 1<<32|0x3<<8|0xc0 {
		t.Errorf("AMD event 0x1c0: config %#x, want %#x", e.Config, uint64(1<<32|0x3<<8|0xc0))
	}
	if _, err := s.Parse("cpu/event=0x1000/"); err == nil || !strings.Contains(err.Error(), "12 bits") {
		t.Errorf("event=0x1000 on AMD (12-bit event select): %v", err)
	}
	if _, err := s.Parse("cpu/pc/"); err == nil || !strings.Contains(err.Error(), `"pc"`) {
		t.Errorf("AMD has no pc bit: %v", err)
	}
}

func TestSysfsHostVM(t *testing.T) {
	s := Sysfs{Devices: "testdata/sysfs/host-vm-6.18", Tracefs: []string{"/nonexistent", "testdata/tracefs"}}
	if s.HasPMU() {
		t.Error("host VM tree (no hardware PMU): HasPMU true")
	}
	ps, err := s.PMUs()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
		if p.Hardware {
			t.Errorf("PMU %s of the VM marked hardware", p.Name)
		}
	}
	if strings.Join(names, ",") != "breakpoint,msr,software,tracepoint,uprobe" {
		t.Errorf("PMUs = %v", names)
	}
	e, err := s.Parse("msr/tsc/")
	if err != nil || e.Type != 9 || e.Config != 0 || e.Hardware {
		t.Errorf("msr/tsc/ = %s hw=%v, %v", e, e.Hardware, err)
	}
	e, err = s.Parse("uprobe/retprobe,ref_ctr_offset=0x20/")
	if err != nil || e.Type != 8 || e.Config != 0x20<<32|1 {
		t.Errorf("uprobe/retprobe,ref_ctr_offset=0x20/ = %s, %v", e, err)
	}
	e, err = s.Parse("software/config=3/")
	if err != nil || e.Type != 1 || e.Config != 3 {
		t.Errorf("software/config=3/ = %s, %v", e, err)
	}
	if _, err := s.Parse("software/event=1/"); err == nil || !strings.Contains(err.Error(), "config=") {
		t.Errorf("software has no formats: %v", err)
	}
	e, err = s.Parse("sched:sched_switch")
	if err != nil || e.Type != unix.PERF_TYPE_TRACEPOINT || e.Config != 372 || e.Kind != KindTracepoint {
		t.Errorf("sched:sched_switch = %s, %v", e, err)
	}
}

// The live machine: its PMUs parse, and HasPMU agrees with the presence of
// a cpu PMU directory.
func TestSystem(t *testing.T) {
	ps, err := System.PMUs()
	if err != nil {
		t.Skipf("no %s: %v", System.Devices, err)
	}
	if _, err := os.Stat(System.Devices + "/cpu"); err == nil && !HasPMU() {
		t.Errorf("%s/cpu exists but HasPMU is false", System.Devices)
	}
	for _, p := range ps {
		for _, a := range p.EventNames() {
			if strings.Contains(p.Events[a], "?") {
				continue // needs a parameter
			}
			if _, err := Parse(p.Name + "/" + a + "/"); err != nil {
				t.Errorf("%s/%s/ (%s): %v", p.Name, a, p.Events[a], err)
			}
		}
	}
}

func TestOpenSoftwareCounts(t *testing.T) {
	e, err := Parse("task-clock")
	if err != nil {
		t.Fatal(err)
	}
	fd, err := Open(e, 0, -1, OpenOpts{})
	if err != nil {
		t.Skipf("perf_event_open not allowed here: %v", err)
	}
	defer unix.Close(fd)
	r0, err := Read(fd)
	if err != nil {
		t.Fatal(err)
	}
	x := 0
	for i := 0; i < 20_000_000; i++ {
		x += i ^ x
	}
	r1, err := Read(fd)
	if err != nil {
		t.Fatal(err)
	}
	d := r1.Sub(r0)
	if d.Value == 0 || d.Enabled == 0 || x == 42 {
		t.Errorf("task-clock did not advance over a busy loop: %+v", d)
	}
}

func TestOpenHardwareWithoutPMU(t *testing.T) {
	if HasPMU() {
		t.Skip("this machine has a hardware PMU: the no-PMU message cannot be checked")
	}
	e, _ := Parse("cycles")
	fd, err := Open(e, 0, -1, OpenOpts{})
	if err == nil {
		unix.Close(fd)
		t.Fatal("cycles opened without a PMU")
	}
	if !errors.Is(err, ErrNoPMU) || !strings.Contains(err.Error(), "cycles") {
		t.Errorf("error %v: want ErrNoPMU naming cycles", err)
	}
}

func TestReadingScaled(t *testing.T) {
	r := Reading{Value: 100, Enabled: 2000, Running: 1000}
	if r.Scaled() != 200 {
		t.Errorf("Scaled = %d", r.Scaled())
	}
	if (Reading{Value: 5, Enabled: 10, Running: 10}).Scaled() != 5 || (Reading{Value: 5}).Scaled() != 5 {
		t.Error("unscaled readings changed")
	}
}

func TestParseCPUList(t *testing.T) {
	got, err := ParseCPUList("0-3,6,8-9\n")
	if err != nil || fmt.Sprint(got) != "[0 1 2 3 6 8 9]" {
		t.Errorf("ParseCPUList = %v, %v", got, err)
	}
	for _, bad := range []string{"a", "3-1", "1,,2", "-1"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q) accepted", bad)
		}
	}
}

// Parse never panics, and every failure is an *Error naming a token of
// the input.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"cycles", "r01c2", "cpu/event=0x3c,umask=1,edge/", "cpu/mem-loads,ldlat=30/", "cpu/event=0x1000/",
		"sched:sched_switch", "cycles:u", "a/b/c/", "cpu/=/", "cpu/event==1/", "r", ":", "/", "cpu/,/", "msr/tsc/:k", "x:y:z"} {
		f.Add(s)
	}
	intel := Sysfs{Devices: "testdata/sysfs/intel-x86", Tracefs: []string{"testdata/tracefs"}}
	f.Fuzz(func(t *testing.T, in string) {
		e, err := intel.Parse(in)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("%q: error %v is not an *Error", in, err)
			}
			if pe.Token != "" && !strings.Contains(in, pe.Token) && !strings.Contains(pe.Reason, "needs a value") {
				t.Fatalf("%q: token %q is not part of the input", in, pe.Token)
			}
			return
		}
		if e.Name == "" {
			t.Fatalf("%q parsed to an event without a name", in)
		}
	})
}

func FuzzParseFormat(f *testing.F) {
	for _, s := range []string{"config:0-7,32-35", "config1:0-63", "config2:5", "config:", "config:9-3", "config:0-7,,8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		fm, err := ParseFormat("x", spec)
		if err != nil {
			return
		}
		var cfg [3]uint64
		fm.put(&cfg, ^uint64(0))
		for _, b := range fm.Bits {
			if b > 63 {
				t.Fatalf("%q: bit %d", spec, b)
			}
		}
	})
}

func TestNames(t *testing.T) {
	hw := Names(KindHardware)
	if !sort.StringsAreSorted(hw) || len(hw) != 10 || hw[0] != "branch-misses" {
		t.Errorf("Names(KindHardware) = %v", hw)
	}
	for _, n := range hw {
		if n == "task-clock" {
			t.Error("task-clock among the hardware names")
		}
	}
	if got := len(Names(KindHardware, KindSoftware, KindCache)); got != len(List()) {
		t.Errorf("Names of every kind: %d, List: %d", got, len(List()))
	}
}
