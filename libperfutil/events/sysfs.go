package events

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Sysfs is where the kernel describes its PMUs and tracepoints. System is
// this machine's; tests use copies of real trees (testdata/).
type Sysfs struct {
	Devices string   // /sys/bus/event_source/devices
	Tracefs []string // tracefs mount points to try, in order
}

// System is the running kernel's sysfs.
var System = Sysfs{
	Devices: "/sys/bus/event_source/devices",
	Tracefs: []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"},
}

// softwarePMUs are the sysfs PMUs the kernel implements without a hardware
// counter (they work in a VM without a virtual PMU).
var softwarePMUs = map[string]bool{
	"software": true, "tracepoint": true, "breakpoint": true, "uprobe": true, "kprobe": true, "msr": true,
}

// Format is one format file of a PMU: how a term's value is placed into
// config, config1 or config2 ("config:0-7,32-35": value bits 0-7 go to
// config bits 0-7, value bits 8-11 to config bits 32-35).
type Format struct {
	Name  string `json:"name"`
	Spec  string `json:"spec"`
	Field int    `json:"field"` // 0: config, 1: config1, 2: config2
	Bits  []uint `json:"-"`     // target bit of each value bit, value bit 0 first
}

// ParseFormat parses a format file's content.
func ParseFormat(name, spec string) (Format, error) {
	spec = strings.TrimSpace(spec)
	f := Format{Name: name, Spec: spec}
	field, ranges, ok := strings.Cut(spec, ":")
	if !ok {
		return f, fmt.Errorf("format %s: %q has no field (want config:LO-HI)", name, spec)
	}
	switch field {
	case "config":
		f.Field = 0
	case "config1":
		f.Field = 1
	case "config2":
		f.Field = 2
	default:
		return f, fmt.Errorf("format %s: field %q is not config, config1 or config2", name, field)
	}
	for _, r := range strings.Split(ranges, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(r), "-")
		a, err := strconv.ParseUint(lo, 10, 8)
		if err != nil || a > 63 {
			return f, fmt.Errorf("format %s: bad bit %q in %q", name, lo, spec)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(hi, 10, 8); err != nil || b > 63 || b < a {
				return f, fmt.Errorf("format %s: bad bit range %q in %q", name, r, spec)
			}
		}
		for bit := a; bit <= b; bit++ {
			f.Bits = append(f.Bits, uint(bit))
		}
	}
	return f, nil
}

// put places v into cfg[f.Field]; false if v has more bits than the format.
func (f Format) put(cfg *[3]uint64, v uint64) bool {
	if len(f.Bits) < 64 && v>>uint(len(f.Bits)) != 0 {
		return false
	}
	for i, bit := range f.Bits {
		if v>>uint(i)&1 != 0 {
			cfg[f.Field] |= 1 << bit
		} else {
			cfg[f.Field] &^= 1 << bit
		}
	}
	return true
}

// PMU is one /sys/bus/event_source/devices entry.
type PMU struct {
	Name     string            `json:"name"`
	Type     uint32            `json:"type"`
	Hardware bool              `json:"hardware"` // counts with hardware counters
	Formats  map[string]Format `json:"formats,omitempty"`
	Events   map[string]string `json:"events,omitempty"` // alias -> terms
}

// FormatNames returns the PMU's format names, sorted.
func (p PMU) FormatNames() []string {
	out := make([]string, 0, len(p.Formats))
	for n := range p.Formats {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// EventNames returns the PMU's event aliases, sorted.
func (p PMU) EventNames() []string {
	out := make([]string, 0, len(p.Events))
	for n := range p.Events {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// ReadPMU reads one PMU's type, formats and event aliases.
func (s Sysfs) ReadPMU(name string) (PMU, error) {
	if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return PMU{}, fmt.Errorf("bad PMU name %q", name)
	}
	dir := filepath.Join(s.Devices, name)
	b, err := os.ReadFile(filepath.Join(dir, "type"))
	if err != nil {
		return PMU{}, fmt.Errorf("PMU %s: %w", name, err)
	}
	t, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil {
		return PMU{}, fmt.Errorf("PMU %s: type %q: %w", name, strings.TrimSpace(string(b)), err)
	}
	p := PMU{Name: name, Type: uint32(t), Formats: map[string]Format{}, Events: map[string]string{}}
	p.Hardware = !softwarePMUs[name] && t != unix.PERF_TYPE_SOFTWARE && t != unix.PERF_TYPE_TRACEPOINT && t != unix.PERF_TYPE_BREAKPOINT
	if ents, err := os.ReadDir(filepath.Join(dir, "format")); err == nil {
		for _, e := range ents {
			c, err := os.ReadFile(filepath.Join(dir, "format", e.Name()))
			if err != nil {
				return PMU{}, fmt.Errorf("PMU %s: %w", name, err)
			}
			f, err := ParseFormat(e.Name(), string(c))
			if err != nil {
				return PMU{}, fmt.Errorf("PMU %s: %w", name, err)
			}
			p.Formats[e.Name()] = f
		}
	}
	if ents, err := os.ReadDir(filepath.Join(dir, "events")); err == nil {
		for _, e := range ents {
			// NAME.scale, NAME.unit, NAME.per-pkg ... describe NAME
			if strings.Contains(e.Name(), ".") {
				continue
			}
			c, err := os.ReadFile(filepath.Join(dir, "events", e.Name()))
			if err != nil {
				return PMU{}, fmt.Errorf("PMU %s: %w", name, err)
			}
			p.Events[e.Name()] = strings.TrimSpace(string(c))
		}
	}
	return p, nil
}

// PMUs lists the PMUs in sysfs, sorted by name.
func (s Sysfs) PMUs() ([]PMU, error) {
	ents, err := os.ReadDir(s.Devices)
	if err != nil {
		return nil, fmt.Errorf("list PMUs: %w", err)
	}
	var out []PMU
	for _, e := range ents {
		p, err := s.ReadPMU(e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// HasPMU reports whether this machine has a hardware CPU PMU.
func HasPMU() bool { return System.HasPMU() }

// HasPMU reports whether s has a hardware CPU PMU: cpu (x86), cpu_core /
// cpu_atom (hybrid x86), armv8_* or any PMU of type PERF_TYPE_RAW.
func (s Sysfs) HasPMU() bool {
	ents, err := os.ReadDir(s.Devices)
	if err != nil {
		return false
	}
	for _, e := range ents {
		n := e.Name()
		if n == "cpu" || n == "cpu_core" || n == "cpu_atom" || strings.HasPrefix(n, "armv8_") || strings.HasPrefix(n, "armv7_") {
			return true
		}
		if b, err := os.ReadFile(filepath.Join(s.Devices, n, "type")); err == nil && strings.TrimSpace(string(b)) == "4" {
			return true
		}
	}
	return false
}

// ParseList parses a comma-separated list of events (SplitList).
func (s Sysfs) ParseList(list string) ([]Event, error) {
	items := SplitList(list)
	if len(items) == 0 {
		return nil, &Error{Input: list, Reason: "no event given"}
	}
	out := make([]Event, 0, len(items))
	for _, it := range items {
		e, err := s.Parse(it)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// Parse parses one event (see the package comment for the syntax).
func (s Sysfs) Parse(input string) (Event, error) {
	in := strings.TrimSpace(input)
	if in == "" {
		return Event{}, &Error{Input: input, Reason: "empty event name"}
	}
	var mods Event
	base := parseModifiers(in, &mods)
	var e Event
	var err error
	switch {
	case strings.Contains(base, "/"):
		e, err = s.parsePMU(input, base)
	case isRaw(base):
		v, perr := strconv.ParseUint(base[1:], 16, 64)
		if perr != nil {
			return Event{}, &Error{Input: input, Token: base, Reason: "raw event: want rHEX (at most 16 hex digits)"}
		}
		e = Event{Name: "r" + strconv.FormatUint(v, 16), Kind: KindRaw, Type: unix.PERF_TYPE_RAW, Config: v, Hardware: true, Help: "raw hardware event"}
	default:
		if n, ok := Lookup(base); ok {
			e = n
		} else if strings.Contains(base, ":") {
			e, err = s.parseTracepoint(input, base)
		} else {
			reason := "unknown event: use a name of `mpevt -l`, rHEX for a raw event, pmu/term=value,../ or subsys:tracepoint"
			if base[0] == 'r' || base[0] == 'R' {
				reason = "unknown event (a raw event is r followed by 1 to 16 hex digits)"
			}
			return Event{}, &Error{Input: input, Token: base, Reason: reason}
		}
	}
	if err != nil {
		return Event{}, err
	}
	e.ExcludeUser, e.ExcludeKernel = mods.ExcludeUser, mods.ExcludeKernel
	if e.ExcludeKernel || e.ExcludeUser {
		e.Name = in
	}
	return e, nil
}

// parsePMU decodes pmu/term=v,term,alias/.
func (s Sysfs) parsePMU(input, in string) (Event, error) {
	name, rest, _ := strings.Cut(in, "/")
	if !strings.HasSuffix(rest, "/") {
		return Event{}, &Error{Input: input, Token: in, Reason: "a PMU event is pmu/term=value,.../ (the closing / is missing)"}
	}
	body := strings.TrimSuffix(rest, "/")
	if strings.Contains(body, "/") {
		return Event{}, &Error{Input: input, Token: in, Reason: "more than one / pair: one PMU event at a time"}
	}
	if name == "" {
		return Event{}, &Error{Input: input, Token: in, Reason: "no PMU name before /"}
	}
	p, err := s.ReadPMU(name)
	if err != nil {
		avail := ""
		if ps, lerr := s.PMUs(); lerr == nil {
			var names []string
			for _, q := range ps {
				names = append(names, q.Name)
			}
			avail = " (this machine has: " + strings.Join(names, ", ") + ")"
		}
		return Event{}, &Error{Input: input, Token: name, Reason: "no such PMU in " + s.Devices + avail}
	}
	var cfg [3]uint64
	terms := strings.Split(body, ",")
	if body == "" {
		return Event{}, &Error{Input: input, Token: in, Reason: "no terms between the slashes"}
	}
	// An alias first expands to its terms; later terms override.
	var expanded []string
	for _, t := range terms {
		t = strings.TrimSpace(t)
		if t == "" {
			return Event{}, &Error{Input: input, Token: in, Reason: "empty term"}
		}
		if _, _, hasValue := strings.Cut(t, "="); !hasValue {
			if alias, ok := p.Events[t]; ok {
				expanded = append(expanded, strings.Split(alias, ",")...)
				continue
			}
		}
		expanded = append(expanded, t)
	}
	for _, t := range expanded {
		t = strings.TrimSpace(t)
		k, v, hasValue := strings.Cut(t, "=")
		val := uint64(1)
		if hasValue {
			if v == "?" {
				return Event{}, &Error{Input: input, Token: k, Reason: "this term needs a value (" + k + "=N)"}
			}
			var perr error
			val, perr = strconv.ParseUint(v, 0, 64)
			if perr != nil {
				return Event{}, &Error{Input: input, Token: t, Reason: "the value is not a number (decimal or 0x hex)"}
			}
		}
		switch k {
		case "config":
			cfg[0] = val
			continue
		case "config1":
			cfg[1] = val
			continue
		case "config2":
			cfg[2] = val
			continue
		}
		f, ok := p.Formats[k]
		if !ok {
			known := p.FormatNames()
			if len(p.Events) > 0 {
				known = append(known, "or an event of "+s.Devices+"/"+name+"/events")
			}
			if len(known) == 0 {
				known = []string{"config=, config1=, config2="}
			}
			return Event{}, &Error{Input: input, Token: k, Reason: fmt.Sprintf("unknown term for PMU %s (it has: %s)", name, strings.Join(known, ", "))}
		}
		if !f.put(&cfg, val) {
			return Event{}, &Error{Input: input, Token: t, Reason: fmt.Sprintf("value does not fit the %d bits of %s (%s)", len(f.Bits), k, f.Spec)}
		}
	}
	return Event{Name: in, Kind: KindPMU, Type: p.Type, Config: cfg[0], Config1: cfg[1], Config2: cfg[2],
		Hardware: p.Hardware, PMU: name, Help: "PMU " + name}, nil
}

// parseTracepoint resolves subsys:event through tracefs.
func (s Sysfs) parseTracepoint(input, in string) (Event, error) {
	sub, ev, _ := strings.Cut(in, ":")
	if sub == "" || ev == "" || strings.ContainsAny(in, "/.") || strings.Count(in, ":") != 1 {
		return Event{}, &Error{Input: input, Token: in, Reason: "a tracepoint is subsys:event (for example sched:sched_switch)"}
	}
	var lastErr error
	for _, dir := range s.Tracefs {
		b, err := os.ReadFile(filepath.Join(dir, "events", sub, ev, "id"))
		if err != nil {
			lastErr = err
			continue
		}
		id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return Event{}, &Error{Input: input, Token: in, Reason: "tracepoint id: " + err.Error()}
		}
		return Event{Name: in, Kind: KindTracepoint, Type: unix.PERF_TYPE_TRACEPOINT, Config: id, Help: "tracepoint"}, nil
	}
	reason := "no such tracepoint"
	if os.IsPermission(lastErr) {
		reason = "tracefs is readable by root only: run as root"
	} else if len(s.Tracefs) > 0 {
		if _, err := os.Stat(filepath.Join(s.Tracefs[0], "events")); err != nil {
			reason = "no such tracepoint (is tracefs mounted at " + s.Tracefs[0] + "?)"
		}
	}
	return Event{}, &Error{Input: input, Token: in, Reason: reason}
}
