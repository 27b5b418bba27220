package continuous

import (
	"crypto/rand"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"perfinsp/analysis/a2n"
)

// Attribute keys (OpenTelemetry semantic conventions, and perfinsp's own).
const (
	attrHostName    = "host.name"
	attrServiceName = "service.name"
	attrPID         = "process.pid"
	attrExeName     = "process.executable.name"
	attrExePath     = "process.executable.path"
	attrContainerID = "container.id"
	attrThreadID    = "thread.id"
	attrThreadName  = "thread.name"
	attrProfileFrom = "profile.frame.type"
)

// ScopeName names the instrumentation scope of the profiles.
const ScopeName = "perfinsp/pitraced"

// builder turns one interval into OTLP profiles: one ResourceProfiles per
// process, the tables shared in the request's dictionary.
type builder struct {
	res      *a2n.Resolver
	host     string
	version  string
	periodNS int64
	services map[string]string // executable name -> service.name

	p       pprofile.Profiles
	dict    pprofile.ProfilesDictionary
	strs    map[string]int32
	maps    map[string]int32
	funcs   map[[2]int32]int32
	attrs   map[attrKey]int32
	stacks  map[string]int32
	locIdx  []int32 // interval location -> location table index
	scratch []byte
}

func (b *builder) str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	i := int32(b.dict.StringTable().Len())
	b.dict.StringTable().Append(s)
	b.strs[s] = i
	return i
}

func (b *builder) mapping(module string) int32 {
	if i, ok := b.maps[module]; ok {
		return i
	}
	m := b.dict.MappingTable().AppendEmpty()
	m.SetFilenameStrindex(b.str(module))
	i := int32(b.dict.MappingTable().Len() - 1)
	b.maps[module] = i
	return i
}

func (b *builder) function(name, module string) int32 {
	k := [2]int32{b.str(name), b.str(module)}
	if i, ok := b.funcs[k]; ok {
		return i
	}
	f := b.dict.FunctionTable().AppendEmpty()
	f.SetNameStrindex(k[0])
	f.SetSystemNameStrindex(k[0])
	f.SetFilenameStrindex(k[1])
	i := int32(b.dict.FunctionTable().Len() - 1)
	b.funcs[k] = i
	return i
}

// attrKey is an attribute: key=str, or key=num if isNum.
type attrKey struct {
	key, str string
	num      int64
	isNum    bool
}

// attrStr is the attribute table index of key=value.
func (b *builder) attrStr(key, value string) int32 { return b.attr(attrKey{key: key, str: value}) }

// attrInt is the attribute table index of key=value.
func (b *builder) attrInt(key string, value int64) int32 {
	return b.attr(attrKey{key: key, num: value, isNum: true})
}

func (b *builder) attr(k attrKey) int32 {
	if i, ok := b.attrs[k]; ok {
		return i
	}
	kv := b.dict.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(b.str(k.key))
	if k.isNum {
		kv.Value().SetInt(k.num)
	} else {
		kv.Value().SetStr(k.str)
	}
	i := int32(b.dict.AttributeTable().Len() - 1)
	b.attrs[k] = i
	return i
}

// build makes the request of iv, whose locations are called names.
// samples is what it holds.
func (b *builder) build(iv *interval, names []frameName, endNS uint64) (pprofile.Profiles, int64) {
	b.p = pprofile.NewProfiles()
	b.dict = b.p.Dictionary()
	// The request is new (the exporter owns the last one); the indexes
	// of its tables keep their memory from one interval to the next.
	if b.strs == nil {
		b.strs, b.maps, b.funcs = map[string]int32{}, map[string]int32{}, map[[2]int32]int32{}
		b.attrs, b.stacks = map[attrKey]int32{}, map[string]int32{}
	}
	clear(b.strs)
	clear(b.maps)
	clear(b.funcs)
	clear(b.attrs)
	clear(b.stacks)
	// Index 0 of every table is the empty entry.
	b.str("")
	b.dict.MappingTable().AppendEmpty()
	b.dict.LocationTable().AppendEmpty()
	b.dict.FunctionTable().AppendEmpty()
	b.dict.StackTable().AppendEmpty()
	b.dict.AttributeTable().AppendEmpty()

	b.locIdx = slices.Grow(b.locIdx[:0], len(iv.locs))[:len(iv.locs)]
	for i, l := range iv.locs {
		b.locIdx[i] = b.location(l.key, names[i])
	}
	byPID := map[uint32]*processProfiles{}
	kinds := [...]struct {
		order                 []*stackCount
		typ, unit, periodType string
		period                int64
	}{
		{iv.order, "samples", "count", "cpu", b.periodNS},
		{iv.offOrder, "off_cpu", "nanoseconds", "off_cpu", 1},
		{iv.intrOrder, "interrupt", "nanoseconds", "interrupt", 1},
	}
	for k, kind := range kinds {
		for _, sc := range kind.order {
			pp, ok := byPID[sc.pid]
			if !ok {
				pp = &processProfiles{sp: b.newProcess(iv, sc.pid)}
				byPID[sc.pid] = pp
			}
			if !pp.has[k] {
				pp.profs[k] = b.newProfile(pp.sp, iv, endNS, kind.typ, kind.unit, kind.periodType, kind.period)
				pp.has[k] = true
			}
			b.sample(pp.profs[k], iv, sc)
		}
	}
	var total int64
	for _, sc := range iv.order {
		total += sc.count
	}
	return b.p, total
}

// processProfiles are one process's profiles of the interval: of CPU
// samples, of off-CPU time and of interrupt time (build's kinds).
type processProfiles struct {
	sp    pprofile.ScopeProfiles
	profs [3]pprofile.Profile
	has   [3]bool
}

// sample adds sc (a count or nanoseconds) to prof.
func (b *builder) sample(prof pprofile.Profile, iv *interval, sc *stackCount) {
	s := prof.Samples().AppendEmpty()
	s.SetStackIndex(b.stack(sc.locs))
	s.Values().Append(sc.count)
	s.AttributeIndices().Append(b.attrInt(attrThreadID, int64(sc.tid)))
	// The thread's name now (a thread names itself after it starts),
	// else the one it had at its exit (interval.names).
	n, ok := "", false
	if p := b.res.Process(sc.pid); p != nil {
		n, ok = p.Threads[sc.tid]
	}
	if !ok || n == "" {
		n = iv.names[threadKey(sc.pid, sc.tid)]
	}
	if n != "" {
		s.AttributeIndices().Append(b.attrStr(attrThreadName, n))
	}
}

func (b *builder) stack(locs []int32) int32 {
	key := b.scratch[:0]
	for _, l := range locs {
		t := b.locIdx[l]
		key = append(key, byte(t), byte(t>>8), byte(t>>16), byte(t>>24))
	}
	b.scratch = key
	if i, ok := b.stacks[string(key)]; ok {
		return i
	}
	st := b.dict.StackTable().AppendEmpty()
	for _, l := range locs {
		st.LocationIndices().Append(b.locIdx[l])
	}
	i := int32(b.dict.StackTable().Len() - 1)
	b.stacks[string(key)] = i
	return i
}

// location adds one interval location to the table.
func (b *builder) location(k locKey, fn frameName) int32 {
	module := fn.module
	frame := "native"
	switch {
	case k.kind == locKernel:
		module, frame = "[kernel.kallsyms]", "kernel"
		if fn.module != "[kernel]" && fn.module != "" {
			module = fn.module
		}
	case fn.module == "JIT":
		frame = "jit"
	case k.kind == locProcess && fn.module == intrModule:
		frame = "kernel"
	}
	loc := b.dict.LocationTable().AppendEmpty()
	loc.SetMappingIndex(b.mapping(module))
	loc.SetAddress(k.addr)
	line := loc.Lines().AppendEmpty()
	line.SetFunctionIndex(b.function(fn.symbol, module))
	loc.AttributeIndices().Append(b.attrStr(attrProfileFrom, frame))
	return int32(b.dict.LocationTable().Len() - 1)
}

// newProcess adds pid's ResourceProfiles; its profiles go in the scope
// returned.
func (b *builder) newProcess(iv *interval, pid uint32) pprofile.ScopeProfiles {
	rp := b.p.ResourceProfiles().AppendEmpty()
	ra := rp.Resource().Attributes()
	ra.PutStr(attrHostName, b.host)
	ra.PutInt(attrPID, int64(pid))
	name := b.res.ProcessName(pid)
	pi := iv.procs[pid]
	if pi != nil && pi.exeName != "" {
		name = pi.exeName
		ra.PutStr(attrExePath, pi.exePath)
	}
	ra.PutStr(attrExeName, name)
	service := ""
	if pi != nil {
		service = pi.service
		if pi.container != "" {
			ra.PutStr(attrContainerID, pi.container)
		}
	}
	if service == "" {
		service = b.services[name]
	}
	if service == "" {
		service = "unknown_service:" + name
	}
	ra.PutStr(attrServiceName, service)
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName(ScopeName)
	sp.Scope().SetVersion(b.version)
	return sp
}

// newProfile adds to sp a profile of iv whose samples are of the type
// and unit given, the period periodType/nanoseconds.
func (b *builder) newProfile(sp pprofile.ScopeProfiles, iv *interval, endNS uint64, typ, unit, periodType string, period int64) pprofile.Profile {
	prof := sp.Profiles().AppendEmpty()
	var id [16]byte
	_, _ = rand.Read(id[:])
	prof.SetProfileID(pprofile.ProfileID(id))
	prof.SetTime(pcommon.Timestamp(iv.startNS))
	prof.SetDurationNano(endNS - iv.startNS)
	prof.SampleType().SetTypeStrindex(b.str(typ))
	prof.SampleType().SetUnitStrindex(b.str(unit))
	prof.PeriodType().SetTypeStrindex(b.str(periodType))
	prof.PeriodType().SetUnitStrindex(b.str("nanoseconds"))
	prof.SetPeriod(period)
	return prof
}
