// Package procscan describes the processes, threads and executable memory
// mappings that already exist, from /proc, as MTE records (the records the
// kernel-event sources cannot produce for tasks that started before tracing
// was turned on).
package procscan

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"perfinsp/libperfutil/trace"
)

// Root is the proc file system's mount point (a variable for tests).
var Root = "/proc"

// Emit receives one MTE record: a minor code of trace.MajorMTE, its fixed
// fields in the order of the code table, and its string. fields is only
// valid during the call.
type Emit func(minor uint32, fields []uint64, str string)

// Protection bits of MTESegment records (the mmap PROT_* values).
const (
	ProtRead  = 1
	ProtWrite = 2
	ProtExec  = 4
)

// AnonPath is the path of an anonymous executable mapping (JIT code), the
// name the kernel's PERF_RECORD_MMAP2 gives it too.
const AnonPath = "//anon"

// Scan describes every existing process, thread and executable mapping:
// MTEProcess (pid, ppid, comm) per process, MTEThreadName (pid, tid, comm)
// per thread, MTESegment (pid, start, size, offset, prot, path) per
// executable mapping, all stamped t. Processes that vanish mid-scan are
// skipped; an error is returned only if no process could be read at all.
func Scan(t uint64, emit Emit) error {
	pids, err := listPids(Root)
	if err != nil {
		return err
	}
	var firstErr error
	read := 0
	for _, pid := range pids {
		err := Describe(pid, t, emit)
		switch {
		case err == nil:
			read++
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, errVanished):
			// exited during the scan
		default:
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if read == 0 && firstErr != nil {
		return fmt.Errorf("procscan: no process could be read: %w", firstErr)
	}
	return nil
}

var errVanished = errors.New("process vanished")

// Describe emits the MTEProcess, MTEThreadName and MTESegment records of one
// process (t is the time stamp of all of them). It returns an error wrapping
// fs.ErrNotExist when the process does not exist (any more).
func Describe(pid int, t uint64, emit Emit) error {
	var fields [5]uint64
	dir := Root + "/" + strconv.Itoa(pid)
	ppid, comm, err := readStat(dir + "/stat")
	if err != nil {
		return fmt.Errorf("procscan: pid %d: %w", pid, err)
	}
	fields[0], fields[1] = uint64(pid), uint64(ppid)
	emit(trace.MTEProcess, fields[:2], comm)

	tids, err := listPids(dir + "/task")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("procscan: pid %d: %w", pid, err)
	}
	for _, tid := range tids {
		name := comm
		if b, err := os.ReadFile(dir + "/task/" + strconv.Itoa(tid) + "/comm"); err == nil {
			name = strings.TrimSuffix(string(b), "\n")
		} else if tid != pid {
			continue // the thread exited
		}
		fields[0], fields[1] = uint64(pid), uint64(tid)
		emit(trace.MTEThreadName, fields[:2], name)
	}

	f, err := os.Open(dir + "/maps")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // exited after its threads were read: what was emitted stays valid
		}
		return fmt.Errorf("procscan: pid %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		m, ok := ParseMapsLine(sc.Bytes())
		if !ok || m.Prot&ProtExec == 0 {
			continue
		}
		fields[0], fields[1], fields[2], fields[3], fields[4] = uint64(pid), m.Start, m.End-m.Start, m.Offset, uint64(m.Prot)
		emit(trace.MTESegment, fields[:5], m.Path)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, unixESRCH) {
		// reading maps of a process that exits mid-read fails with ESRCH; keep what was read
		return fmt.Errorf("procscan: pid %d maps: %w", pid, err)
	}
	return nil
}

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End, Offset uint64
	Prot               int // ProtRead|ProtWrite|ProtExec
	Path               string
}

// ParseMapsLine parses one line of /proc/PID/maps:
// "start-end perms offset dev inode   path". The path may contain spaces;
// an anonymous mapping gets AnonPath.
func ParseMapsLine(line []byte) (Mapping, bool) {
	var m Mapping
	next := func() []byte {
		line = bytes.TrimLeft(line, " ")
		i := bytes.IndexByte(line, ' ')
		if i < 0 {
			w := line
			line = nil
			return w
		}
		w := line[:i]
		line = line[i+1:]
		return w
	}
	rng, perms, off := next(), next(), next()
	next() // dev
	next() // inode
	dash := bytes.IndexByte(rng, '-')
	if dash < 0 || len(perms) < 3 {
		return m, false
	}
	var err error
	if m.Start, err = strconv.ParseUint(string(rng[:dash]), 16, 64); err != nil {
		return m, false
	}
	if m.End, err = strconv.ParseUint(string(rng[dash+1:]), 16, 64); err != nil || m.End < m.Start {
		return m, false
	}
	if m.Offset, err = strconv.ParseUint(string(off), 16, 64); err != nil {
		return m, false
	}
	if perms[0] == 'r' {
		m.Prot |= ProtRead
	}
	if perms[1] == 'w' {
		m.Prot |= ProtWrite
	}
	if perms[2] == 'x' {
		m.Prot |= ProtExec
	}
	p := bytes.TrimLeft(line, " ")
	if len(p) == 0 {
		m.Path = AnonPath
	} else {
		m.Path = string(p)
	}
	return m, true
}

// readStat returns the ppid and comm of /proc/PID/stat. The comm is between
// the first '(' and the last ')' (it may itself contain parentheses).
func readStat(path string) (int, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, "", err
	}
	open := bytes.IndexByte(b, '(')
	cls := bytes.LastIndexByte(b, ')')
	if open < 0 || cls < open {
		return 0, "", fmt.Errorf("%s: malformed", path)
	}
	comm := string(b[open+1 : cls])
	rest := bytes.Fields(b[cls+1:]) // state ppid ...
	if len(rest) < 2 {
		return 0, "", fmt.Errorf("%s: malformed", path)
	}
	ppid, err := strconv.Atoi(string(rest[1]))
	if err != nil {
		return 0, "", fmt.Errorf("%s: bad ppid: %w", path, err)
	}
	return ppid, comm, nil
}

// listPids returns the numeric entries of a directory (/proc or /proc/PID/task).
func listPids(dir string) ([]int, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("procscan: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("procscan: %s: %w", dir, err)
	}
	out := make([]int, 0, len(names))
	for _, n := range names {
		if v, err := strconv.Atoi(n); err == nil && v > 0 {
			out = append(out, v)
		}
	}
	return out, nil
}

// Tasks calls fn(pid, tid) for every thread of every process now in /proc
// (names only, nothing is read: cheap enough to prime a tid → pid cache).
func Tasks(fn func(pid, tid int)) error {
	pids, err := listPids(Root)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		tids, err := listPids(Root + "/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			continue
		}
		for _, tid := range tids {
			fn(pid, tid)
		}
	}
	return nil
}

// Tgid returns the process id (thread group id) of a thread, from
// /proc/TID/status (which exists for every live thread id even though /proc
// lists only processes).
func Tgid(tid int) (int, error) {
	b, err := os.ReadFile(Root + "/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("procscan: tgid of %d: %w", tid, err)
	}
	return statusInt(b, "Tgid:")
}

// Ppid returns the parent process id of a process, from /proc/PID/status.
func Ppid(pid int) (int, error) {
	b, err := os.ReadFile(Root + "/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("procscan: ppid of %d: %w", pid, err)
	}
	return statusInt(b, "PPid:")
}

func statusInt(b []byte, key string) (int, error) {
	i := bytes.Index(b, []byte("\n"+key))
	if i < 0 {
		if !bytes.HasPrefix(b, []byte(key)) {
			return 0, fmt.Errorf("procscan: no %s in status", key)
		}
	} else {
		b = b[i+1:]
	}
	b = b[len(key):]
	if j := bytes.IndexByte(b, '\n'); j >= 0 {
		b = b[:j]
	}
	v, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return 0, fmt.Errorf("procscan: %s %q: %w", key, bytes.TrimSpace(b), err)
	}
	return v, nil
}
