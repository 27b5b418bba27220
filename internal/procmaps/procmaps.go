// Package procmaps reads the text of /proc/PID/maps: the one parser of it
// (the daemon's process scan, call-flow naming and A2N's vDSO lookup).
package procmaps

import (
	"bytes"
	"strconv"
	"strings"
)

// Prot bits of Mapping.Prot (the MTE segment record's prot field).
const (
	ProtRead  = 1
	ProtWrite = 2
	ProtExec  = 4
)

// Mapping is one line of a maps file.
type Mapping struct {
	Start, End uint64
	Offset     uint64 // file offset of Start
	Prot       uint32 // Prot* bits
	Path       string // "" for anonymous memory; may hold spaces; [vdso] etc. as printed
	// The file's device (major, minor) and inode; 0 for anonymous memory.
	Major, Minor uint32
	Inode        uint64
}

// Executable calls fn for each executable mapping in maps, in order. Lines
// it cannot read are skipped (maps text is read from a live process and
// may end mid-line). Only the lines of executable mappings are parsed
// (the others are told by their permissions' third letter), without a
// copy of the whole text; the error is always nil.
func Executable(maps []byte, fn func(m Mapping)) error {
	for len(maps) > 0 {
		line := maps
		if i := bytes.IndexByte(maps, '\n'); i >= 0 {
			line, maps = maps[:i], maps[i+1:]
		} else {
			maps = nil
		}
		if !executable(line) {
			continue
		}
		m, ok := parse(string(line))
		if ok && m.Prot&ProtExec != 0 {
			fn(m)
		}
	}
	return nil
}

// executable tells whether a maps line's permissions (its second field)
// may say x: false only when they surely do not.
func executable(line []byte) bool {
	i := bytes.IndexByte(line, ' ')
	if i < 0 {
		return false
	}
	perms := bytes.TrimLeft(line[i:], " \t")
	return len(perms) < 3 || perms[2] == 'x'
}

// parse reads one line: start-end perms offset dev inode [path].
func parse(line string) (Mapping, bool) {
	f := strings.Fields(line)
	if len(f) < 5 || len(f[1]) < 4 {
		return Mapping{}, false
	}
	lo, hi, ok := strings.Cut(f[0], "-")
	if !ok {
		return Mapping{}, false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	off, err3 := strconv.ParseUint(f[2], 16, 64)
	if err1 != nil || err2 != nil || err3 != nil || end < start {
		return Mapping{}, false
	}
	m := Mapping{Start: start, End: end, Offset: off}
	if ma, mi, ok := strings.Cut(f[3], ":"); ok {
		a, err1 := strconv.ParseUint(ma, 16, 32)
		b, err2 := strconv.ParseUint(mi, 16, 32)
		if err1 == nil && err2 == nil {
			m.Major, m.Minor = uint32(a), uint32(b)
		}
	}
	m.Inode, _ = strconv.ParseUint(f[4], 10, 64)
	if f[1][0] == 'r' {
		m.Prot |= ProtRead
	}
	if f[1][1] == 'w' {
		m.Prot |= ProtWrite
	}
	if f[1][2] == 'x' {
		m.Prot |= ProtExec
	}
	if len(f) >= 6 {
		// The path may hold spaces: the rest of the line after the
		// fifth field (the inode).
		rest := line
		for i := 0; i < 5; i++ {
			rest = strings.TrimLeft(rest, " \t")
			if j := strings.IndexAny(rest, " \t"); j >= 0 {
				rest = rest[j:]
			}
		}
		m.Path = strings.TrimSpace(rest)
	}
	return m, true
}
