package a2n

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// DefaultPerfMapDir is where perf maps, jitdumps and the JProf agent's Java
// stacks are looked for when a Resolver names no PerfMapDir: /tmp, where
// perf's convention puts them. (A test binary points it at a directory of
// its own, so that files other programs left in /tmp do not change its
// reports.)
var DefaultPerfMapDir = "/tmp"

func (r *Resolver) perfMapDir() string {
	if r.PerfMapDir != "" {
		return r.PerfMapDir
	}
	return DefaultPerfMapDir
}

// loadPerfMap reads /tmp/perf-PID.map (written by `jcmd PID
// Compiler.perfmap`, `node --perf-basic-prof`, ...) and /tmp/jit-PID.dump
// (jitdump: code-load records) for pid. Both are untrusted: only regular
// files of bounded size owned by the user running post or by root are
// read (openfile.go); a refused file gives one warning line.
func (r *Resolver) loadPerfMap(pid uint32) symtab {
	dir := r.perfMapDir()
	var out symtab
	read := func(name string, limit int64) []byte {
		if !r.perfMaps.mayHold(dir, name) {
			return nil
		}
		b, err := readChecked(filepath.Join(dir, name), limit, true)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				r.Cache.note(err.Error())
			}
			return nil
		}
		return b
	}
	if b := read("perf-"+strconv.Itoa(int(pid))+".map", MaxPerfMapSize); b != nil {
		out = append(out, ParsePerfMap(b)...)
	}
	if b := read("jit-"+strconv.Itoa(int(pid))+".dump", MaxJitdumpSize); b != nil {
		out = append(out, ParseJitdump(b)...)
	}
	return out.sortDedup()
}

// perfMapDir knows which perf map and jitdump files a directory holds,
// once it was asked about more than perfMapOpens files: a system-wide
// trace has thousands of processes whose anonymous addresses ask for
// them, and most have none (thousands of failed opens, a quarter of a
// many-process stacks report); one listing answers them all.
type perfMapDir struct {
	mu    sync.Mutex // Locate of two processes' addresses may run at once
	asked int
	names map[string]bool // the directory's perf-*, jit-* and jprof-* names; nil: not listed (or unlistable)
	tried bool            // the listing was tried
}

// perfMapOpens is the number of files opened before the directory is
// listed (a listing of a large /tmp costs more than a few opens).
const perfMapOpens = 16

// mayHold reports whether dir may hold name: false only when a listing
// of dir (made once, after perfMapOpens files) does not show it.
func (d *perfMapDir) mayHold(dir, name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.asked++; d.asked <= perfMapOpens {
		return true
	}
	if !d.tried {
		d.tried = true
		if ents, err := os.ReadDir(dir); err == nil {
			d.names = map[string]bool{}
			for _, e := range ents {
				if n := e.Name(); strings.HasPrefix(n, "perf-") || strings.HasPrefix(n, "jit-") || strings.HasPrefix(n, "jprof-") {
					d.names[n] = true
				}
			}
		}
	}
	return d.names == nil || d.names[name]
}

// ParsePerfMap parses perf map text: "START SIZE name" per line, hex numbers.
func ParsePerfMap(b []byte) []Sym {
	var out []Sym
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		f := strings.SplitN(line, " ", 3)
		if len(f) < 3 {
			continue
		}
		start, err1 := strconv.ParseUint(strings.TrimPrefix(f[0], "0x"), 16, 64)
		size, err2 := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		if err1 != nil || err2 != nil || size == 0 {
			continue
		}
		out = append(out, Sym{Addr: start, Size: size, Name: strings.TrimSpace(f[2])})
	}
	return out
}

// ParseJitdump reads the code-load records of a jitdump file (the format
// perf inject reads: a header, then records; JIT_CODE_LOAD = 0). Malformed
// input ends the parse; what was read is kept.
func ParseJitdump(b []byte) []Sym {
	if len(b) < 40 {
		return nil
	}
	var bo binary.ByteOrder = binary.LittleEndian
	switch binary.LittleEndian.Uint32(b) {
	case 0x4A695444: // "JiTD" little-endian
	case 0x4454694A:
		bo = binary.BigEndian
	default:
		return nil
	}
	hdrSize := int(bo.Uint32(b[8:]))
	if hdrSize < 40 || hdrSize > len(b) {
		return nil
	}
	var out []Sym
	for off := hdrSize; off+16 <= len(b); {
		id := bo.Uint32(b[off:])
		size := int(bo.Uint32(b[off+4:]))
		if size < 16 || off+size > len(b) {
			break
		}
		rec := b[off : off+size]
		if id == 0 && len(rec) >= 56 { // JIT_CODE_LOAD
			codeAddr := bo.Uint64(rec[32:])
			codeSize := bo.Uint64(rec[40:])
			name := rec[56:]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			out = append(out, Sym{Addr: codeAddr, Size: codeSize, Name: string(name)})
		}
		if id == 3 { // JIT_CODE_CLOSE
			break
		}
		off += size
	}
	return out
}
