// Package procscan describes live processes from /proc as MTE records:
// the start of a trace (every process) and a process named on its own.
package procscan

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"perfinsp/format/trace"
	"perfinsp/internal/procmaps"
)

// Emit receives one MTE record.
type Emit func(minor uint32, fields []uint64, str string)

// Scan describes every existing process, thread and executable mapping from
// /proc: MTE_PROCESS per process (pid, ppid, name), MTE_THREAD per thread,
// MTE_SEGMENT per executable mapping, all stamped t. Tasks that vanish
// during the scan are skipped.
func Scan(t uint64, emit func(minor uint32, fields []uint64, str string)) error {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return fmt.Errorf("scan /proc: %w", err)
	}
	described := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if Describe(pid, t, emit) == nil {
			described++
		}
	}
	if described == 0 {
		return errors.New("scan /proc: no process could be read")
	}
	return nil
}

// Describe writes the MTE records of one live process.
func Describe(pid int, t uint64, emit func(minor uint32, fields []uint64, str string)) error {
	dir := "/proc/" + strconv.Itoa(pid)
	name, ppid, err := statusOf(dir)
	if err != nil {
		return err
	}
	fields := make([]uint64, 0, 8)
	emit(trace.MTEProcess, append(fields, uint64(pid), uint64(ppid)), name)
	if tasks, err := os.ReadDir(dir + "/task"); err == nil {
		for _, te := range tasks {
			tid, err := strconv.Atoi(te.Name())
			if err != nil {
				continue
			}
			comm, err := os.ReadFile(dir + "/task/" + te.Name() + "/comm")
			if err != nil {
				continue
			}
			emit(trace.MTEThreadName, append(fields[:0], uint64(pid), uint64(tid)), strings.TrimRight(string(comm), "\n"))
		}
	}
	maps, err := os.ReadFile(dir + "/maps")
	if err != nil {
		return nil // kernel threads and vanished tasks have no maps
	}
	return procmaps.Executable(maps, func(m procmaps.Mapping) {
		emit(trace.MTESegment, append(fields[:0], uint64(pid), m.Start, m.End-m.Start, m.Offset, uint64(m.Prot)), m.Path)
		if m.Inode != 0 && strings.HasPrefix(m.Path, "/") {
			emit(trace.MTEFile, append(fields[:0], uint64(pid), m.Start, uint64(m.Major), uint64(m.Minor), m.Inode), "")
		}
	})
}

func statusOf(dir string) (name string, ppid int, err error) {
	b, err := os.ReadFile(dir + "/status")
	if err != nil {
		return "", 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "Name":
			name = strings.TrimSpace(v)
		case "PPid":
			ppid, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return name, ppid, nil
}
