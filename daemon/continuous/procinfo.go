package continuous

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// procInfo is what the resource attributes say of a process, read from
// /proc once per process: kept until the process exits or execs (the
// aggregator forgets it at its record), or until the kernel loses records
// (an exit may be among them: the aggregator forgets every one). The
// start time tells a pid reused from the one read.
type procInfo struct {
	start     string // /proc/PID/stat field 22
	exePath   string
	exeName   string
	service   string // OTEL_SERVICE_NAME of its environment, or ""
	container string // container id from its cgroup path, or ""
}

// maxProcInfos bounds the cache (cleared when full).
const maxProcInfos = 8192

// maxProcRead bounds what is read of one /proc file (environ, cgroup).
const maxProcRead = 256 << 10

type procInfos struct {
	m    map[uint32]*procInfo
	proc string // "/proc" (tests may point elsewhere)
	buf  []byte // scratch of read
}

func newProcInfos() *procInfos { return &procInfos{m: map[uint32]*procInfo{}, proc: "/proc"} }

// read returns up to maxProcRead bytes of the file at path (nil if it
// cannot be opened), in p.buf: valid until the next read. (A process
// sampled for the first time costs three of these: through the system
// calls, without an os.File each.)
func (p *procInfos) read(path string) []byte {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	if p.buf == nil {
		p.buf = make([]byte, 0, 4096)
	}
	b := p.buf[:0]
	for len(b) < maxProcRead {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := unix.Read(fd, b[len(b):min(cap(b), maxProcRead)])
		if n <= 0 || err != nil {
			break
		}
		b = b[:len(b)+n]
	}
	p.buf = b
	return b
}

// startTime is field 22 of /proc/PID/stat (after the parenthesised comm,
// which may hold spaces and parentheses).
func startTime(stat []byte) string {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return ""
	}
	// The fields after the comm are numbers and a state letter,
	// separated by blanks: field 22 is the 20th of them.
	rest := stat[i+1:]
	for n := 0; ; n++ {
		for len(rest) > 0 && isBlank(rest[0]) {
			rest = rest[1:]
		}
		if len(rest) == 0 {
			return ""
		}
		j := 0
		for j < len(rest) && !isBlank(rest[j]) {
			j++
		}
		if n == 19 {
			return string(rest[:j])
		}
		rest = rest[j:]
	}
}

func isBlank(c byte) bool {
	return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f'
}

// containerID is the last run of 64 lowercase hex digits in a cgroup file
// (as a search for [0-9a-f]{64}, leftmost and not overlapping, finds it
// last), or "".
func containerID(cg []byte) string {
	last := -1
	for i := 0; i < len(cg); {
		if !isHexLower(cg[i]) {
			i++
			continue
		}
		j := i
		for j < len(cg) && isHexLower(cg[j]) {
			j++
		}
		if n := (j - i) / 64; n > 0 {
			last = i + (n-1)*64
		}
		i = j
	}
	if last < 0 {
		return ""
	}
	return string(cg[last : last+64])
}

func isHexLower(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' }

// get returns pid's information ("" fields where /proc did not say).
func (p *procInfos) get(pid uint32) *procInfo {
	if pi, ok := p.m[pid]; ok {
		return pi
	}
	dir := p.proc + "/" + strconv.Itoa(int(pid))
	st := startTime(p.read(dir + "/stat"))
	if st == "" {
		// Gone (or never there): so are its other files. Not kept:
		// read again at the next interval's first sample.
		return &procInfo{}
	}
	if len(p.m) >= maxProcInfos {
		clear(p.m)
	}
	pi := &procInfo{start: st}
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		pi.exePath = strings.TrimSuffix(exe, " (deleted)")
		pi.exeName = filepath.Base(pi.exePath)
	}
	// Of the environment only OTEL_SERVICE_NAME is kept (the last one
	// set); the command line is not exported at all (it may hold
	// secrets).
	env := p.read(dir + "/environ")
	for len(env) > 0 {
		kv := env
		if i := bytes.IndexByte(env, 0); i >= 0 {
			kv, env = env[:i], env[i+1:]
		} else {
			env = nil
		}
		if v, ok := bytes.CutPrefix(kv, []byte("OTEL_SERVICE_NAME=")); ok && len(v) > 0 && len(v) <= 256 {
			pi.service = string(v)
		}
	}
	pi.container = containerID(p.read(dir + "/cgroup"))
	p.m[pid] = pi
	return pi
}

// forget drops a process that exited or exec'd.
func (p *procInfos) forget(pid uint32) { delete(p.m, pid) }

// forgetAll drops every process (records lost: an exit or exec may be
// among them).
func (p *procInfos) forgetAll() { clear(p.m) }
