package uprobe

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"perfinsp/libperfutil/events"
)

// Dynamic is a set of tracefs dynamic uprobe events (uprobe_events), one
// per probed instruction, for probes whose close must not wait for the
// kernel: closing a perf event of the uprobe PMU waits for grace periods
// (tens of milliseconds each, one close at a time machine-wide) with every
// probe not yet closed still trapping. A perf event on a dynamic event
// that other perf events still use is closed at once, its breakpoint
// removed from the process it probed if no other event there wants it. So
// each dynamic event is held by an anchor: a disabled perf event on this
// process's main thread (whose memory maps none of the probed files, so it
// places no breakpoint), opened with the event and closed last (Close),
// when no breakpoint is left to trap. Probes opened on a Dynamic
// (OpenOpts.Dynamic) are tracepoint events of its dynamic events.
//
// The events live in a tracefs group of this process (perfinsp_PID); a
// group left by a process that no longer exists is removed by the next
// OpenDynamic. Writing uprobe_events needs root: OpenDynamic fails
// otherwise and the caller uses the uprobe PMU.
type Dynamic struct {
	dir   string // tracefs
	group string
	ctl   *os.File // uprobe_events, opened for appending
	sites map[dynSite]*dynEvent
	names []string
}

type dynSite struct {
	path string
	off  uint64
}

// dynEvent is one dynamic event: its tracepoint id and anchor.
type dynEvent struct {
	id     uint64
	anchor int
}

// dynSeq numbers the dynamic events of this process (several Dynamic sets
// share its group).
var dynSeq atomic.Uint64

// dynGroupPrefix names the tracefs groups of Dynamic, followed by the pid.
const dynGroupPrefix = "perfinsp_"

// OpenDynamic opens uprobe_events of the first tracefs of s that has one,
// and removes the groups of processes that are gone.
func OpenDynamic(s events.Sysfs) (*Dynamic, error) {
	var last error = errors.New("no tracefs")
	for _, dir := range s.Tracefs {
		f, err := os.OpenFile(filepath.Join(dir, "uprobe_events"), os.O_RDWR|os.O_APPEND, 0)
		if err != nil {
			last = err
			continue
		}
		d := &Dynamic{dir: dir, group: fmt.Sprintf("%s%d", dynGroupPrefix, os.Getpid()), ctl: f, sites: map[dynSite]*dynEvent{}}
		d.removeStale()
		return d, nil
	}
	return nil, fmt.Errorf("tracefs uprobe_events: %w", last)
}

// removeStale removes the events of groups whose process is gone (a walk
// killed before its Close). An event still in use is refused by the
// kernel and stays.
func (d *Dynamic) removeStale() {
	b, err := os.ReadFile(filepath.Join(d.dir, "uprobe_events"))
	if err != nil {
		return
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		_, ev, ok := strings.Cut(f[0], ":")
		group, _, ok2 := strings.Cut(ev, "/")
		pid, err := strconv.Atoi(strings.TrimPrefix(group, dynGroupPrefix))
		if !ok || !ok2 || !strings.HasPrefix(group, dynGroupPrefix) || err != nil || pid <= 0 {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			_, _ = d.ctl.WriteString("-:" + ev + "\n")
		}
	}
}

// usable says whether a dynamic event can name path: uprobe_events takes
// lines of blank-separated fields, "(" starts a reference counter, and a
// file name is whatever its owner chose (a newline in it would add a line
// of its own): only absolute paths of printable characters but those.
func usable(path string) bool {
	if !filepath.IsAbs(path) {
		return false
	}
	for _, c := range []byte(path) {
		if c <= ' ' || c >= 0x7f || c == '(' || c == ')' || c == '\\' {
			return false
		}
	}
	return true
}

// event is the tracepoint id of the dynamic event at off of path, created
// (with its anchor) on first use.
func (d *Dynamic) event(path string, off uint64) (uint64, error) {
	k := dynSite{path, off}
	if e := d.sites[k]; e != nil {
		return e.id, nil
	}
	name := fmt.Sprintf("s%d", dynSeq.Add(1))
	full := d.group + "/" + name
	if _, err := fmt.Fprintf(d.ctl, "p:%s %s:%#x\n", full, path, off); err != nil {
		return 0, fmt.Errorf("uprobe_events: add %s:%#x: %w", path, off, err)
	}
	d.names = append(d.names, full)
	b, err := os.ReadFile(filepath.Join(d.dir, "events", d.group, name, "id"))
	if err != nil {
		return 0, fmt.Errorf("uprobe_events: %s: %w", full, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("uprobe_events: %s: id %q", full, b)
	}
	a := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_TRACEPOINT,
		Config: id,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Bits:   unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&a, os.Getpid(), -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("anchor of %s:%#x: %w", path, off, err)
	}
	d.sites[k] = &dynEvent{id: id, anchor: fd}
	return id, nil
}

// Events is the number of dynamic events in place (0 for a nil d).
func (d *Dynamic) Events() int {
	if d == nil {
		return 0
	}
	return len(d.sites)
}

// Close closes the anchors, each a grace period but with no breakpoint
// left once the probes on them are closed, and removes the events. The
// probes opened on d must be closed first.
func (d *Dynamic) Close() error {
	if d == nil || d.ctl == nil {
		return nil
	}
	for k, e := range d.sites {
		unix.Close(e.anchor)
		delete(d.sites, k)
	}
	var first error
	for _, n := range d.names {
		if _, err := d.ctl.WriteString("-:" + n + "\n"); err != nil && first == nil {
			first = fmt.Errorf("uprobe_events: remove %s: %w", n, err)
		}
	}
	d.names = nil
	err := d.ctl.Close()
	d.ctl = nil
	if first != nil {
		return first
	}
	return err
}
