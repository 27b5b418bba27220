// Package control holds the one control API of the trace facility: the
// Facility interface every backend implements (the kernel module through
// /dev/pitrace, or the pitraced daemon on mainline kernel mechanisms), its
// configuration and status types, and backend selection. Tools use only this
// package and never see which backend serves them.
package control

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"perfinsp/format/nrm2"
)

// Documented defaults (README: swtrace).
const (
	DefaultTraceBufSize = 8 << 20 // per CPU
	DefaultMTEBufSize   = 1 << 20 // per CPU
	DefaultRateHz       = 1000
	MaxRateHz           = 100000
	MaxBufSize          = 1 << 30 // per CPU
)

// Modes: the values of the trace file header.
const (
	ModeNormal = nrm2.ModeNormal
	ModeWrap   = nrm2.ModeWrap
	ModeCont   = nrm2.ModeCont
)

// ParseMode parses normal|wrap|cont.
func ParseMode(s string) (int, error) {
	switch strings.ToLower(s) {
	case "normal", "nrm":
		return ModeNormal, nil
	case "wrap", "wrap-around", "wraparound":
		return ModeWrap, nil
	case "cont", "continuous":
		return ModeCont, nil
	}
	return 0, fmt.Errorf("unknown mode %q: use normal, wrap or cont", s)
}

// ModeName names a mode.
func ModeName(m int) string { return nrm2.ModeName(uint32(m)) }

// Config is what `swtrace init` sets.
type Config struct {
	TraceBufSize int `json:"trace_buf_size"` // bytes per CPU
	MTEBufSize   int `json:"mte_buf_size"`   // bytes per CPU
}

// Validate checks sizes and fills in defaults.
func (c *Config) Validate() error {
	if c.TraceBufSize == 0 {
		c.TraceBufSize = DefaultTraceBufSize
	}
	if c.MTEBufSize == 0 {
		c.MTEBufSize = DefaultMTEBufSize
	}
	for _, v := range []struct {
		name string
		n    int
	}{{"trace buffer", c.TraceBufSize}, {"MTE buffer", c.MTEBufSize}} {
		if v.n < 4096 {
			return fmt.Errorf("%s size %d bytes is too small: the minimum is 4K", v.name, v.n)
		}
		if v.n > MaxBufSize {
			return fmt.Errorf("%s size %d bytes is too large: the maximum is 1G per CPU", v.name, v.n)
		}
	}
	return nil
}

// CPUStatus is one CPU's buffer state.
type CPUStatus struct {
	CPU        int    `json:"cpu"`
	Records    uint64 `json:"records"`
	Lost       uint64 `json:"lost"`
	MTERecords uint64 `json:"mte_records"`
	MTELost    uint64 `json:"mte_lost"`
	Used       int    `json:"used"`     // trace bytes held
	MTEUsed    int    `json:"mte_used"` // MTE bytes held
	Full       bool   `json:"full"`
}

// States.
const (
	StateFree        = "free"        // nothing allocated
	StateInitialized = "initialized" // buffers allocated, never turned on
	StateOn          = "on"          // tracing
	StateOff         = "off"         // stopped; data held until get or free
)

// Status is what `swtrace info` shows.
type Status struct {
	Backend      string      `json:"backend"`
	State        string      `json:"state"`
	Mode         int         `json:"mode"`
	TraceBufSize int         `json:"trace_buf_size"`
	MTEBufSize   int         `json:"mte_buf_size"`
	RateHz       int         `json:"rate_hz"`
	Event        string      `json:"event,omitempty"`
	Enabled      []uint16    `json:"enabled"`
	ContFile     string      `json:"cont_file,omitempty"`
	StoppedFull  bool        `json:"stopped_full"`
	CPUs         []CPUStatus `json:"cpus"`
	Note         string      `json:"note,omitempty"`
	// Owner is the uid that turned the held trace on (-1: none); only it
	// and root may stop, write or free it.
	Owner int `json:"owner_uid"`
	// StreamError says that writing the stream file failed (a full disk)
	// and how many records were dropped since.
	StreamError string `json:"stream_error,omitempty"`
	// Unwound says how the last trace's user stacks were unwound by
	// call-frame information (--unwind dwarf) and what it cost.
	Unwound string `json:"unwound,omitempty"`
}

// Facility is the control API of the trace facility. Every method is one
// swtrace command. Implementations serialize concurrent callers.
type Facility interface {
	// Backend names the backend: "kmod" or "daemon".
	Backend() string
	// Init allocates the per-CPU buffers (freeing earlier ones). It fails
	// while tracing is on.
	Init(cfg Config) error
	// Enable and Disable select record types by major code.
	Enable(majors []uint16) error
	Disable(majors []uint16) error
	// SetMode selects the mode; contFile names the file cont mode writes to.
	SetMode(mode int, contFile string) error
	// SetRate sets the tprof sampling rate in Hz (time-based sampling) and,
	// if event is not empty, event-based sampling on that hardware event
	// every rate events.
	SetRate(hz int, event string) error
	// On starts tracing; with no Init before, the documented defaults are used.
	On() error
	// Off stops tracing; the data stays in the buffers until Get or Free.
	Off() error
	// Get writes the buffers to a trace file. It refuses while tracing is on.
	Get(path string) error
	// Info reports the state.
	Info() (*Status, error)
	// Free releases the buffers.
	Free() error
	// Hook writes a user record (TraceHook) on the calling CPU.
	Hook(major uint16, minor uint32, words []uint32, str string) error
	// Close releases the connection to the backend (not the buffers).
	Close() error
}

// WriteErrorPolicy is implemented by backends that can stop tracing when
// the stream file of wrap or cont mode cannot be written (a full disk),
// instead of going on and counting what cannot be written as lost.
type WriteErrorPolicy interface {
	SetStopOnWriteError(stop bool) error
}

// StackDepth is implemented by backends that record call stacks
// (`swtrace enable callstack`) with a configurable depth limit.
type StackDepth interface {
	SetStackDepth(frames int) error
}

// StackUnwinder is implemented by backends that can unwind user stacks
// by the call-frame information of the code (`swtrace enable callstack
// --unwind dwarf`) as well as by frame pointers.
type StackUnwinder interface {
	SetStackUnwind(u Unwind) error
}

// Unwind says how the user part of call stacks is unwound.
type Unwind struct {
	// DWARF: by the .eh_frame call-frame information of the code, from a
	// copy of StackBytes bytes of the user stack taken at each sample;
	// else by frame pointers.
	DWARF      bool `json:"dwarf"`
	StackBytes int  `json:"stack_bytes,omitempty"`
}

// Bounds of Unwind.StackBytes: a multiple of 8 below 64 KiB (the kernel's
// limit on one sample's stack copy).
const (
	DefaultStackBytes = 8192
	MaxStackBytes     = 65528
)

// ParseUnwind reads perf's --call-graph syntax: "fp", "dwarf" or
// "dwarf,BYTES".
func ParseUnwind(s string) (Unwind, error) {
	mode, size, sized := strings.Cut(s, ",")
	switch mode {
	case "fp":
		if sized {
			return Unwind{}, fmt.Errorf("unwind %q: a size goes with dwarf only (dwarf,BYTES)", s)
		}
		return Unwind{}, nil
	case "dwarf":
		u := Unwind{DWARF: true, StackBytes: DefaultStackBytes}
		if sized {
			n, err := strconv.Atoi(size)
			if err != nil || n < 64 || n > MaxStackBytes || n%8 != 0 {
				return Unwind{}, fmt.Errorf("unwind %q: the stack copy must be a multiple of 8 bytes from 64 to %d", s, MaxStackBytes)
			}
			u.StackBytes = n
		}
		return u, nil
	}
	return Unwind{}, fmt.Errorf("unwind %q: use fp (frame pointers) or dwarf[,BYTES] (call-frame information, BYTES of stack copied per sample, default %d)", s, DefaultStackBytes)
}

// String is the --unwind form of u.
func (u Unwind) String() string {
	if !u.DWARF {
		return "fp"
	}
	return fmt.Sprintf("dwarf,%d", u.StackBytes)
}

// Noticer is implemented by backends that learn, while connecting, things
// the user must be told (for example that the daemon died holding a trace).
type Noticer interface {
	Notices() []string
}

// Opener opens one backend.
type Opener struct {
	Name string
	// Available reports whether the backend can be used here and, if not, why.
	Available func() (bool, string)
	Open      func() (Facility, error)
	// Priority: the available backend with the highest priority is chosen
	// automatically.
	Priority int
}

var (
	mu      sync.Mutex
	openers = map[string]Opener{}
)

// Register makes a backend selectable. Backends call it from init.
func Register(o Opener) {
	mu.Lock()
	defer mu.Unlock()
	openers[o.Name] = o
}

// EnvBackend is the environment variable that forces a backend.
const EnvBackend = "PERFINSP_BACKEND"

// The backend names: one vocabulary for $PERFINSP_BACKEND wherever a
// backend is chosen (the trace facility, ITrace, PTT, the C library).
const (
	BackendKmod   = "kmod"   // the pitrace module (/dev/pitrace)
	BackendDaemon = "daemon" // mainline kernel mechanisms (perf events, ptrace), through pitraced where state outlives a command
	BackendAuto   = "auto"   // the module when it is loaded, else daemon
)

var perfNote sync.Once

// ChooseBackend is the one backend policy: it returns the backend asked
// for by name, or by $PERFINSP_BACKEND when name is "" or "auto", as
// BackendKmod, BackendDaemon or BackendAuto (nothing named). "perf", PTT's
// former name for the no-module backend, is taken as daemon with a note on
// stderr (once).
func ChooseBackend(name string) (string, error) {
	if name == "" || name == BackendAuto {
		name = os.Getenv(EnvBackend)
	}
	switch name {
	case "", BackendAuto:
		return BackendAuto, nil
	case BackendKmod, BackendDaemon:
		return name, nil
	case "perf":
		perfNote.Do(func() {
			fmt.Fprintf(os.Stderr, "perfinsp: note: %s=perf is the former name of the daemon backend: say daemon\n", EnvBackend)
		})
		return BackendDaemon, nil
	}
	return "", fmt.Errorf("unknown backend %q in $%s: use %s, %s or %s", name, EnvBackend, BackendKmod, BackendDaemon, BackendAuto)
}

// ErrNoBackend is returned when no backend can be used.
var ErrNoBackend = errors.New("no trace facility backend is available")

// NotChosen says why each backend of higher priority than the one named
// (the one in use) is not available here: the auto selection's reasons.
func NotChosen(inUse string) []string {
	mu.Lock()
	list := make([]Opener, 0, len(openers))
	for _, o := range openers {
		list = append(list, o)
	}
	mu.Unlock()
	var prio int
	for _, o := range list {
		if o.Name == inUse {
			prio = o.Priority
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Priority > list[j].Priority })
	var out []string
	for _, o := range list {
		if o.Priority > prio {
			if ok, why := o.Available(); !ok {
				out = append(out, o.Name+": "+why)
			}
		}
	}
	return out
}

// Open opens the backend named by name, or by $PERFINSP_BACKEND, or the
// best available one when both are empty or "auto".
func Open(name string) (Facility, error) {
	name, err := ChooseBackend(name)
	if err != nil {
		return nil, err
	}
	mu.Lock()
	list := make([]Opener, 0, len(openers))
	for _, o := range openers {
		list = append(list, o)
	}
	mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].Priority > list[j].Priority })
	if name != BackendAuto {
		for _, o := range list {
			if o.Name == name {
				if ok, why := o.Available(); !ok {
					return nil, fmt.Errorf("backend %s is not available: %s", name, why)
				}
				return o.Open()
			}
		}
		names := make([]string, 0, len(list))
		for _, o := range list {
			names = append(names, o.Name)
		}
		return nil, fmt.Errorf("unknown backend %q: use one of %s, or auto", name, strings.Join(names, ", "))
	}
	var whys []string
	for _, o := range list {
		if ok, why := o.Available(); ok {
			return o.Open()
		} else {
			whys = append(whys, o.Name+": "+why)
		}
	}
	return nil, fmt.Errorf("%w (%s)", ErrNoBackend, strings.Join(whys, "; "))
}
