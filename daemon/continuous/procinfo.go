package continuous

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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
}

func newProcInfos() *procInfos { return &procInfos{m: map[uint32]*procInfo{}, proc: "/proc"} }

func readBounded(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, maxProcRead))
	return b
}

// startTime is field 22 of /proc/PID/stat (after the parenthesised comm,
// which may hold spaces and parentheses).
func startTime(stat []byte) string {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

var containerRE = regexp.MustCompile(`[0-9a-f]{64}`)

// get returns pid's information ("" fields where /proc did not say).
func (p *procInfos) get(pid uint32) *procInfo {
	if pi, ok := p.m[pid]; ok {
		return pi
	}
	dir := filepath.Join(p.proc, strconv.Itoa(int(pid)))
	st := startTime(readBounded(dir + "/stat"))
	if len(p.m) >= maxProcInfos {
		clear(p.m)
	}
	pi := &procInfo{start: st}
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		pi.exePath = strings.TrimSuffix(exe, " (deleted)")
		pi.exeName = filepath.Base(pi.exePath)
	}
	// Of the environment only OTEL_SERVICE_NAME is kept; the command
	// line is not exported at all (it may hold secrets).
	for _, kv := range bytes.Split(readBounded(dir+"/environ"), []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("OTEL_SERVICE_NAME=")); ok && len(v) > 0 && len(v) <= 256 {
			pi.service = string(v)
		}
	}
	if cg := readBounded(dir + "/cgroup"); cg != nil {
		if ids := containerRE.FindAll(cg, -1); len(ids) > 0 {
			pi.container = string(ids[len(ids)-1])
		}
	}
	if st != "" {
		p.m[pid] = pi
	}
	return pi
}

// forget drops a process that exited or exec'd.
func (p *procInfos) forget(pid uint32) { delete(p.m, pid) }

// forgetAll drops every process (records lost: an exit or exec may be
// among them).
func (p *procInfos) forgetAll() { clear(p.m) }
