package continuous

import (
	"cmp"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"perfinsp/analysis/a2n"
)

// frameName is what a location is called in the profile.
type frameName struct {
	module, symbol string
}

// maxNames bounds the names kept from one interval to the next (past it
// they start anew at the next interval).
const maxNames = 1 << 16

// namingSlack bounds what naming adds to the agent's resident memory:
// past it (a module's tables are garbage once it is named; its file is
// unmapped then) the namer collects garbage and returns it before the
// next module.
const namingSlack = 8 << 20

// freshModule: a module file changed more recently than this is named
// from the file without storing its table in the symbol cache the first
// time. A program being rebuilt (a build's outputs, tests' binaries, a
// development loop) is a new file each time: its table, written once and
// read by no later run, would cost the agent more than the parse and push
// the tables of the node's lasting programs out of the cache. A file
// named again (new offsets in a later interval) is stored then, as is
// one first named past this age.
const freshModule = time.Minute

// namer names an interval's locations once each. Names of module offsets
// and kernel addresses are kept from one interval to the next; a module's
// symbol tables are loaded (from the table cache when there) only for the
// offsets not named yet, one module at a time, and let go once they are
// named: the agent holds the names its samples hit, not the symbol tables
// of every program the node runs.
type namer struct {
	cacheDir string
	// kernelAge: how old the symbol cache's kernel table may be to be
	// used (0: /proc/kallsyms is read each time).
	kernelAge time.Duration
	ks        *ksyms
	names     map[locKey]frameName
	intern    map[string]string
	// files is the identity of each module file whose names are kept,
	// as of when they were made: a file replaced at its path (a program
	// rebuilt) has its names made anew. checked: the paths stat'ed in
	// this nameAll.
	files   map[string]fileID
	checked map[string]bool
	// young: the paths checked in this nameAll whose file changed less
	// than fresh ago and was not named before (not stored in the
	// cache); parsedYoung: the files named so.
	young       map[string]bool
	parsedYoung map[fileID]bool
	fresh       time.Duration
	base        int64 // resident bytes after the last collection (naming)
	// Of the last nameAll: the locations named anew (not kept from an
	// earlier interval) and the modules read for them.
	named, modulesRead int
}

func newNamer(cacheDir string, kernelAge time.Duration) *namer {
	return &namer{cacheDir: cacheDir, kernelAge: kernelAge, names: map[locKey]frameName{}, intern: map[string]string{},
		files: map[string]fileID{}, checked: map[string]bool{}, young: map[string]bool{}, parsedYoung: map[fileID]bool{}, fresh: freshModule}
}

// fileID is what tells a module file from another at the same path.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    int64 // ns
}

// statID is path's identity now and when its file last changed (its
// data or its inode: a file copied with its times kept is new too); ok
// false: it cannot be stat'ed.
func statID(path string) (id fileID, changed time.Time, ok bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, time.Time{}, false
	}
	id = fileID{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano()}
	return id, time.Unix(0, max(st.Mtim.Nano(), st.Ctim.Nano())), true
}

// checkFiles forgets the names kept of each module of locs whose file was
// replaced since they were made, and notes the files changed lately (one
// stat a module an interval).
func (n *namer) checkFiles(locs []location) {
	clear(n.checked)
	clear(n.young)
	now := time.Now()
	for i := range locs {
		l := &locs[i]
		if l.key.kind != locModule || l.vdso != nil || n.checked[l.key.module] {
			continue
		}
		path := l.key.module
		n.checked[path] = true
		id, changed, ok := statID(path)
		if !ok {
			continue // gone: its names stay what they were
		}
		if now.Sub(changed) < n.fresh && !n.parsedYoung[id] {
			n.young[path] = true
		}
		if old, seen := n.files[path]; seen && old != id {
			for k := range n.names {
				if k.kind == locModule && k.module == path {
					delete(n.names, k)
				}
			}
		}
		n.files[path] = id
	}
}

// reset reads the kernel's symbols anew (from the symbol cache when it
// holds them for the kernel as it is, younger than kernelAge) and forgets the names kept
// (modules replaced on disk, kernel modules loaded or removed).
func (n *namer) reset() {
	hint := 1 << 16
	if n.ks != nil {
		hint = len(n.ks.ents) + len(n.ks.ents)/16
	}
	n.ks = nil // (the old table is garbage before the new one is built)
	n.ks = loadKernel(n.cacheDir, n.kernelAge, hint)
	clear(n.names)
	clear(n.intern)
	clear(n.files)
	clear(n.parsedYoung)
}

func (n *namer) str(s string) string {
	if v, ok := n.intern[s]; ok {
		return v
	}
	n.intern[s] = s
	return s
}

// nameAll names locs (one interval's), in order; r is the resolver their
// Locs came from.
func (n *namer) nameAll(r *a2n.Resolver, locs []location) []frameName {
	if n.ks == nil {
		n.reset()
	}
	if len(n.names) > maxNames || len(n.files) > maxNames || len(n.parsedYoung) > maxNames {
		clear(n.names)
		clear(n.intern)
		clear(n.files)
		clear(n.parsedYoung)
	}
	n.named, n.modulesRead = 0, 0
	n.checkFiles(locs)
	out := make([]frameName, len(locs))
	var todo []int // module offsets not named yet
	for i := range locs {
		l := &locs[i]
		if l.key.kind == locProcess {
			// JIT code, perf maps, anonymous memory: named by the
			// process's tables as they were at the sample.
			out[i] = l.fn
			continue
		}
		if fn, ok := n.names[l.key]; ok {
			out[i] = fn
			continue
		}
		n.named++
		switch {
		case l.key.kind == locKernel:
			m, s := n.ks.name(l.key.addr)
			out[i] = frameName{module: n.str(m), symbol: n.str(s)}
			n.names[l.key] = out[i]
		case l.vdso != nil:
			res := r.Finish(*l.vdso)
			out[i] = frameName{module: n.str(res.Module), symbol: n.str(res.Symbol)}
			n.names[l.key] = out[i]
		default:
			todo = append(todo, i)
		}
	}
	slices.SortFunc(todo, func(a, b int) int { return cmp.Compare(locs[a].key.module, locs[b].key.module) })
	if len(todo) > 0 {
		n.base = residentBytes()
	}
	for len(todo) > 0 {
		path := locs[todo[0]].key.module
		j := 1
		for j < len(todo) && locs[todo[j]].key.module == path {
			j++
		}
		n.nameModule(path, locs, todo[:j], out)
		todo = todo[j:]
	}
	return out
}

// nameModule names the offsets in the module at path of locs[idx...].
func (n *namer) nameModule(path string, locs []location, idx []int, out []frameName) {
	c := a2n.Cache{Dir: n.cacheDir, MapTables: true}
	if n.young[path] {
		c.Dir = "" // parsed, not stored (freshModule)
		n.parsedYoung[n.files[path]] = true
	}
	m := c.Module(path)
	n.modulesRead++
	module := n.str(path)
	for _, i := range idx {
		off := locs[i].key.addr
		sym := ""
		if m.Err == nil {
			if s, _, ok := m.Symbol(off); ok {
				sym = s.Name
			}
		}
		if sym == "" {
			sym = fmt.Sprintf("%s+0x%x", baseName(path), off)
		}
		out[i] = frameName{module: module, symbol: n.str(sym)}
		n.names[locs[i].key] = out[i]
	}
	// A module parsed from its file (not the table cache) has it
	// mapped: unmapped now, not when a collection finds the module
	// unreachable (the names are copies). Its tables go with c.
	m.Release()
	if rss := residentBytes(); rss > n.base+namingSlack {
		debug.FreeOSMemory()
		n.base = residentBytes()
	}
}

// residentBytes is the agent's resident set now (0 if unknown).
func residentBytes() int64 {
	var buf [128]byte
	f, err := os.Open("/proc/self/statm")
	if err != nil {
		return 0
	}
	k, _ := f.Read(buf[:])
	f.Close()
	fields := strings.Fields(string(buf[:k]))
	if len(fields) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(fields[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
