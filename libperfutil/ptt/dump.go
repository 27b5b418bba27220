package ptt

import "time"

// Dump is what `ptt dump` shows: the agent's PTT holder builds it, the ptt
// tool prints it (text or JSON).
type Dump struct {
	Backend    string       `json:"backend"`
	Metrics    []string     `json:"metrics"`
	Target     string       `json:"target"`
	Started    time.Time    `json:"started"`
	Guarantees Guarantees   `json:"guarantees"`
	Note       string       `json:"note"`
	Threads    []ThreadDump `json:"threads"`
	// CPUs holds the per-CPU interrupt buckets; nil without the module.
	CPUs    []CPUBucket `json:"cpus"`
	CPUNote string      `json:"cpus_note,omitempty"`
	Errors  []string    `json:"errors,omitempty"`
	// NewThreads says how threads created after `ptt on` are picked up.
	NewThreads string `json:"new_threads,omitempty"`
}

// ThreadDump is one thread's row. Interrupts and InterruptTime are null
// where the backend cannot provide them (perf).
type ThreadDump struct {
	Pid           int               `json:"pid"`
	Tid           int               `json:"tid"`
	Name          string            `json:"name"`
	Values        map[string]uint64 `json:"values"`
	Dispatches    *uint64           `json:"dispatches"`
	Interrupts    *uint64           `json:"interrupts"`
	InterruptTime *uint64           `json:"interrupt_time"`
	// InterruptValues is each metric spent in interrupts taken while the
	// thread ran, left out of Values (module backend only).
	InterruptValues map[string]uint64 `json:"interrupt_values,omitempty"`
	// Running: on a CPU at the snapshot (module backend).
	Running bool `json:"running,omitempty"`
	Exited  bool `json:"exited"`
	// UncountedStartNs: a thread created after `ptt on` is found by the
	// agent (process connector or rescan) some time after it started;
	// this is the CPU time it had run before its counters were opened,
	// which Values do not include (the scheduler's figure,
	// /proc/PID/task/TID/schedstat; daemon backend only).
	UncountedStartNs *uint64 `json:"uncounted_start_ns,omitempty"`
}

// CPUBucket is one CPU's interrupt bucket (module backend): outermost
// interrupts PTT saw, TSC cycles spent in them, and each metric spent in
// them.
type CPUBucket struct {
	CPU        int               `json:"cpu"`
	Interrupts uint64            `json:"interrupts"`
	TSC        uint64            `json:"tsc"`
	Values     map[string]uint64 `json:"values"`
}

// Agent ops of the PTT holder (pitraced hosts it; docs/agent.md).
const (
	OpOn   = "ptt-on"   // OnArgs; file 0: /dev/pitrace for the kmod backend
	OpOff  = "ptt-off"  //
	OpDump = "ptt-dump" // -> Dump
)

// OnArgs starts the caller's holder.
type OnArgs struct {
	Metrics []string `json:"metrics"`
	Pid     int      `json:"pid"` // 0: every thread the caller may observe
	Backend string   `json:"backend"`
}

// OnResult describes the holder started.
type OnResult struct {
	AgentPid int `json:"agent_pid"`
	Threads  int `json:"threads"`
}
