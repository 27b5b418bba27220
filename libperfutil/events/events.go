// Package events is the project's one table of perf events: what a name
// such as "cycles", "task-clock", "L1-dcache-load-misses", "r01c2",
// "cpu/event=0x3c,umask=0x00/" or "sched:sched_switch" means to
// perf_event_open (type, config, config1, config2), and whether counting it
// needs a hardware PMU. swtrace (-e), ptt (-m), the daemon, the module
// backend, mpevt and cpi all take their event names from here; the C
// library's table (libperfutil/c/ptt.c) is tested against it.
//
// The API:
//
//	e, err := events.Parse("cycles")       // one event: e.Type, e.Config, e.Hardware, e.Name
//	es, err := events.ParseList("cycles,cpu/event=0xc0/")  // a comma list (commas inside pmu/../ kept)
//	events.List()                          // the named events (hardware, software, cache), table order
//	events.Lookup("cs")                    // a named event by name or alias (no sysfs)
//	events.Names(events.KindHardware)      // sorted names, for "use one of ..." messages
//	events.HasPMU()                        // does this machine have a hardware PMU?
//	attr := e.Attr()                       // unix.PerfEventAttr with type, config, config1/2, :u/:k
//	fd, err := events.Open(e, pid, cpu, events.OpenOpts{})  // perf_event_open with errors a user can act on
//	events.Measure(spec, func(events.Sample) error)         // count a process, a command or every CPU
//
// Syntax accepted by Parse (as perf(1) spells it):
//
//	NAME                  a named event of List() (case-insensitive; aliases such as cpu-cycles, cs)
//	rHEX                  a raw hardware event: PERF_TYPE_RAW, config = HEX
//	PMU/TERM=V,TERM,../   a sysfs PMU (/sys/bus/event_source/devices/PMU) with terms decoded
//	                      through its format files (format/TERM: "config:0-7,32-35"), or the
//	                      special terms config=, config1=, config2=; a bare TERM is TERM=1
//	PMU/ALIAS[,TERM=V]/   an event file of the PMU (PMU/events/ALIAS), extra terms override
//	SUBSYS:EVENT          a tracepoint (tracefs events/SUBSYS/EVENT/id)
//	...:u  ...:k          modifiers: user only, kernel only
//
// Errors are *Error values that name the bad token.
package events

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Kind says where an event comes from.
type Kind int

// Event kinds.
const (
	KindHardware   Kind = iota // PERF_TYPE_HARDWARE, a generic hardware event
	KindSoftware               // PERF_TYPE_SOFTWARE, counted by the kernel
	KindCache                  // PERF_TYPE_HW_CACHE
	KindRaw                    // PERF_TYPE_RAW, rHEX
	KindPMU                    // a sysfs PMU, pmu/terms/
	KindTracepoint             // PERF_TYPE_TRACEPOINT, subsys:event
)

func (k Kind) String() string {
	switch k {
	case KindHardware:
		return "hardware"
	case KindSoftware:
		return "software"
	case KindCache:
		return "cache"
	case KindRaw:
		return "raw"
	case KindPMU:
		return "pmu"
	case KindTracepoint:
		return "tracepoint"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Event is a parsed event: everything perf_event_open needs to count it.
type Event struct {
	Name     string `json:"name"` // canonical name ("cycles" for "cpu-cycles"), or the text given
	Kind     Kind   `json:"kind"`
	Type     uint32 `json:"type"` // perf_event_attr.type
	Config   uint64 `json:"config"`
	Config1  uint64 `json:"config1,omitempty"`
	Config2  uint64 `json:"config2,omitempty"`
	Hardware bool   `json:"hardware"` // needs a hardware PMU counter
	PMU      string `json:"pmu,omitempty"`
	Unit     string `json:"unit,omitempty"`
	Help     string `json:"help,omitempty"`
	// ExcludeUser / ExcludeKernel: the :k and :u modifiers.
	ExcludeUser   bool `json:"exclude_user,omitempty"`
	ExcludeKernel bool `json:"exclude_kernel,omitempty"`
}

// String is the event's name with its encoding, for listings and errors.
func (e Event) String() string {
	s := fmt.Sprintf("%s (type %d, config %#x", e.Name, e.Type, e.Config)
	if e.Config1 != 0 {
		s += fmt.Sprintf(", config1 %#x", e.Config1)
	}
	if e.Config2 != 0 {
		s += fmt.Sprintf(", config2 %#x", e.Config2)
	}
	return s + ")"
}

// Error is a parse error; Token is the part of Input that is wrong.
type Error struct {
	Input  string
	Token  string
	Reason string
}

func (e *Error) Error() string {
	if e.Token == "" || e.Token == e.Input {
		return fmt.Sprintf("event %q: %s", e.Input, e.Reason)
	}
	return fmt.Sprintf("event %q: %q: %s", e.Input, e.Token, e.Reason)
}

// ErrNoPMU is wrapped by errors about hardware events on a machine without a
// hardware PMU.
var ErrNoPMU = errors.New("no hardware PMU on this machine")

// named is one row of the table. Aliases are other spellings perf accepts.
type named struct {
	name    string
	aliases []string
	kind    Kind
	config  uint64
	unit    string
	help    string
}

// table: the generic hardware and software events of
// include/uapi/linux/perf_event.h, with perf(1)'s names.
var table = []named{
	{"cycles", []string{"cpu-cycles"}, KindHardware, unix.PERF_COUNT_HW_CPU_CYCLES, "cycles", "processor cycles"},
	{"instructions", nil, KindHardware, unix.PERF_COUNT_HW_INSTRUCTIONS, "instructions", "instructions completed"},
	{"cache-references", nil, KindHardware, unix.PERF_COUNT_HW_CACHE_REFERENCES, "accesses", "last-level cache accesses"},
	{"cache-misses", nil, KindHardware, unix.PERF_COUNT_HW_CACHE_MISSES, "misses", "last-level cache misses"},
	{"branches", []string{"branch-instructions"}, KindHardware, unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS, "branches", "branch instructions"},
	{"branch-misses", nil, KindHardware, unix.PERF_COUNT_HW_BRANCH_MISSES, "branches", "mispredicted branches"},
	{"bus-cycles", nil, KindHardware, unix.PERF_COUNT_HW_BUS_CYCLES, "cycles", "bus cycles"},
	{"stalled-cycles-frontend", []string{"idle-cycles-frontend"}, KindHardware, unix.PERF_COUNT_HW_STALLED_CYCLES_FRONTEND, "cycles", "cycles the front end issued nothing"},
	{"stalled-cycles-backend", []string{"idle-cycles-backend"}, KindHardware, unix.PERF_COUNT_HW_STALLED_CYCLES_BACKEND, "cycles", "cycles the back end retired nothing"},
	{"ref-cycles", nil, KindHardware, unix.PERF_COUNT_HW_REF_CPU_CYCLES, "cycles", "reference cycles (constant rate)"},
	{"cpu-clock", nil, KindSoftware, unix.PERF_COUNT_SW_CPU_CLOCK, "ns", "CPU time (cpu-clock timer)"},
	{"task-clock", nil, KindSoftware, unix.PERF_COUNT_SW_TASK_CLOCK, "ns", "CPU time of the task"},
	{"page-faults", []string{"faults"}, KindSoftware, unix.PERF_COUNT_SW_PAGE_FAULTS, "faults", "page faults"},
	{"context-switches", []string{"cs"}, KindSoftware, unix.PERF_COUNT_SW_CONTEXT_SWITCHES, "switches", "context switches"},
	{"cpu-migrations", []string{"migrations"}, KindSoftware, unix.PERF_COUNT_SW_CPU_MIGRATIONS, "migrations", "moves to another CPU"},
	{"minor-faults", nil, KindSoftware, unix.PERF_COUNT_SW_PAGE_FAULTS_MIN, "faults", "minor page faults"},
	{"major-faults", nil, KindSoftware, unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ, "faults", "major page faults"},
	{"alignment-faults", nil, KindSoftware, unix.PERF_COUNT_SW_ALIGNMENT_FAULTS, "faults", "alignment faults"},
	{"emulation-faults", nil, KindSoftware, unix.PERF_COUNT_SW_EMULATION_FAULTS, "faults", "instructions emulated by the kernel"},
	{"dummy", nil, KindSoftware, unix.PERF_COUNT_SW_DUMMY, "", "counts nothing (side-band records only)"},
	{"bpf-output", nil, KindSoftware, unix.PERF_COUNT_SW_BPF_OUTPUT, "", "BPF output (samples from BPF programs)"},
	{"cgroup-switches", nil, KindSoftware, 11, "switches", "context switches to a task of another cgroup (Linux 5.13+)"},
}

// Generic cache events: PERF_TYPE_HW_CACHE, config = id | op<<8 | result<<16.
var (
	cacheIDs = []struct {
		name string
		id   uint64
	}{{"L1-dcache", 0}, {"L1-icache", 1}, {"LLC", 2}, {"dTLB", 3}, {"iTLB", 4}, {"branch", 5}, {"node", 6}}
	cacheOps = []struct {
		name, plural string
		op           uint64
	}{{"load", "loads", 0}, {"store", "stores", 1}, {"prefetch", "prefetches", 2}}
)

// namedEvents is the table of named events, made at the first use (every tool
// links this package; most never look an event up, and building it would
// lengthen every tool's start).
var namedEvents = sync.OnceValues(func() (byName map[string]Event, ordered []Event) {
	byName = map[string]Event{}
	add := func(e Event, aliases ...string) {
		ordered = append(ordered, e)
		byName[strings.ToLower(e.Name)] = e
		for _, a := range aliases {
			byName[strings.ToLower(a)] = e
		}
	}
	for _, n := range table {
		e := Event{Name: n.name, Kind: n.kind, Config: n.config, Unit: n.unit, Help: n.help}
		if n.kind == KindHardware {
			e.Type, e.Hardware = unix.PERF_TYPE_HARDWARE, true
		} else {
			e.Type = unix.PERF_TYPE_SOFTWARE
		}
		add(e, n.aliases...)
	}
	for _, c := range cacheIDs {
		for _, o := range cacheOps {
			access := Event{Name: c.name + "-" + o.plural, Kind: KindCache, Type: unix.PERF_TYPE_HW_CACHE,
				Config: c.id | o.op<<8, Hardware: true, Unit: "accesses", Help: c.name + " " + o.name + " accesses"}
			miss := Event{Name: c.name + "-" + o.name + "-misses", Kind: KindCache, Type: unix.PERF_TYPE_HW_CACHE,
				Config: c.id | o.op<<8 | 1<<16, Hardware: true, Unit: "misses", Help: c.name + " " + o.name + " misses"}
			add(access)
			add(miss)
		}
	}
	return byName, ordered
})

// List returns the named events (hardware, software, then cache), in table
// order. Raw, PMU and tracepoint events are not listed here: see PMUs.
func List() []Event {
	_, ordered := namedEvents()
	out := make([]Event, len(ordered))
	copy(out, ordered)
	return out
}

// Names returns the names of the named events of the given kinds, sorted.
func Names(kinds ...Kind) []string {
	var out []string
	_, ordered := namedEvents()
	for _, e := range ordered {
		for _, k := range kinds {
			if e.Kind == k {
				out = append(out, e.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Lookup finds a named event of List() by name or alias (case-insensitive).
func Lookup(name string) (Event, bool) {
	byName, _ := namedEvents()
	e, ok := byName[strings.ToLower(strings.TrimSpace(name))]
	return e, ok
}

// Parse parses one event against this machine's sysfs PMUs and tracefs.
func Parse(name string) (Event, error) {
	return System.Parse(name)
}

// ParseList parses a comma-separated list against this machine.
func ParseList(list string) ([]Event, error) {
	return System.ParseList(list)
}

// SplitList splits "a,pmu/x=1,y=2/,b" at the commas outside pmu/../ terms.
// Blank items are dropped.
func SplitList(list string) []string {
	var out []string
	depth := false
	start := 0
	flush := func(end int) {
		if s := strings.TrimSpace(list[start:end]); s != "" {
			out = append(out, s)
		}
	}
	for i := 0; i < len(list); i++ {
		switch list[i] {
		case '/':
			depth = !depth
		case ',', ' ':
			if !depth {
				flush(i)
				start = i + 1
			}
		}
	}
	flush(len(list))
	return out
}

// parseModifiers strips perf's :u / :k / :uk modifiers from a named, raw
// or PMU event; anything else (a tracepoint subsys:event) is left alone.
func parseModifiers(s string, e *Event) string {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s
	}
	mod, base := s[i+1:], s[:i]
	if mod == "" || strings.Trim(mod, "uk") != "" {
		return s
	}
	if _, ok := Lookup(base); !ok && !isRaw(base) && !strings.HasSuffix(base, "/") {
		return s
	}
	u, k := strings.Contains(mod, "u"), strings.Contains(mod, "k")
	e.ExcludeKernel = u && !k
	e.ExcludeUser = k && !u
	return base
}

func isRaw(s string) bool {
	if len(s) < 2 || (s[0] != 'r' && s[0] != 'R') {
		return false
	}
	for _, c := range s[1:] {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return false
		}
	}
	return len(s) <= 17
}
