package kevents

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"perfinsp/libperfutil/trace"
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
	return mapsEach(maps, func(start, end, off uint64, prot uint32, path string) {
		emit(trace.MTESegment, append(fields[:0], uint64(pid), start, end-start, off, uint64(prot)), path)
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

// mapsEach calls fn for each executable mapping in /proc/PID/maps text.
func mapsEach(maps []byte, fn func(start, end, off uint64, prot uint32, path string)) error {
	sc := bufio.NewScanner(bytes.NewReader(maps))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// start-end perms offset dev inode path
		f := strings.Fields(line)
		if len(f) < 5 || len(f[1]) < 4 || f[1][2] != 'x' {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil || end < start {
			continue
		}
		var prot uint32
		if f[1][0] == 'r' {
			prot |= 1
		}
		if f[1][1] == 'w' {
			prot |= 2
		}
		prot |= 4
		path := ""
		if len(f) >= 6 {
			// The path may contain spaces: take the rest of the line after
			// the fifth field (the inode).
			rest := line
			for i := 0; i < 5; i++ {
				rest = strings.TrimLeft(rest, " \t")
				if j := strings.IndexAny(rest, " \t"); j >= 0 {
					rest = rest[j:]
				}
			}
			path = strings.TrimSpace(rest)
		}
		fn(start, end, off, prot, path)
	}
	return sc.Err()
}
