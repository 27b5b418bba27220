package main

import (
	"fmt"
	"strings"

	"perfinsp/analysis/a2n"
	"perfinsp/analysis/tprof"
)

// maxListed is how many modules one grouped warning names on stderr; the
// reports' headers (tprof.out, post.show) keep every line.
const maxListed = 3

// notReadPrefix starts the warning of a module post could not read.
const notReadPrefix = "WARNING: module not read, its ticks show as module+offset: "

// stderrWarnings is warns as post prints them on stderr: the modules that
// could not be read grouped into one line when there are more than
// maxListed of them (a system-wide trace names every deleted build
// product of the run); every other warning as it is.
func stderrWarnings(warns []string) []string {
	var out, notRead []string
	for _, w := range warns {
		if p, ok := strings.CutPrefix(w, notReadPrefix); ok {
			notRead = append(notRead, p)
			continue
		}
		out = append(out, w)
	}
	if len(notRead) <= maxListed {
		for _, p := range notRead {
			out = append(out, notReadPrefix+p)
		}
		return out
	}
	deleted := 0
	for _, p := range notRead {
		if strings.Contains(p, "deleted since tracing") || strings.Contains(p, "deleted while its process ran") {
			deleted++
		}
	}
	line := fmt.Sprintf("WARNING: %d modules not read (%d of them deleted), their ticks show as module+offset: %s, and %d more (every one is listed at the top of tprof.out and post.show)",
		len(notRead), deleted, strings.Join(notRead[:maxListed], "; "), len(notRead)-maxListed)
	return append(out, line)
}

// unknownShare is the minimum share of stack ticks with a frame no module
// maps above which post suggests DWARF unwinding.
const unknownShare = 0.05

// stackHint says once, when a good share of the call stacks pass through
// addresses no module maps (frame-pointer walks through code built
// without frame pointers), how to recover them; "" otherwise.
func stackHint(rep *tprof.Report) string {
	if rep.StackTicks == 0 {
		return ""
	}
	var bad uint64
	for _, s := range rep.Stacks() {
		for _, f := range s.Frames {
			if !f.Kernel && f.Module == "<unknown>" {
				bad += s.N
				break
			}
		}
	}
	if float64(bad) < unknownShare*float64(rep.StackTicks) {
		return ""
	}
	return fmt.Sprintf("note: %.0f %% of the call stacks hold frames no module maps (<unknown>): a frame-pointer walk through code built without frame pointers; DWARF unwinding recovers them (run.tprof --call-graph dwarf, or swtrace enable callstack --unwind dwarf)",
		100*float64(bad)/float64(rep.StackTicks))
}

// unnamedShare is the minimum share of the report's ticks in a module's
// unnamed functions above which post says where its names could come from.
const unnamedShare = 0.05

// symbolsHints says, for each module without a symbol table whose
// functions without a name hold a good share of the ticks (a distribution
// binary without its debug package, a program stripped at install), where
// a debug file was looked for and not found, or that the module has no
// debug link to look for one by; nil when the names are there.
func symbolsHints(rep *tprof.Report, c *a2n.Cache) []string {
	mods, total := rep.UnnamedTicks()
	var out []string
	for _, mt := range mods {
		if total == 0 || float64(mt.Unnamed) < unnamedShare*float64(total) {
			break
		}
		m := c.Module(mt.Module)
		if m.Err != nil {
			continue // (warned as not read)
		}
		where := "it has neither a build-id nor a .gnu_debuglink to find a debug file by"
		if files := m.DebugFiles(); len(files) > 0 {
			looked := files[0]
			if len(files) > 1 {
				looked += fmt.Sprintf(" and %d more places by its .gnu_debuglink", len(files)-1)
			}
			where = "no debug file of it was found (looked for " + looked + "): install its debug symbols (Debian: the package's -dbgsym) or put its debug file there"
		}
		if m.Warning != "" {
			where = m.Warning
		}
		out = append(out, fmt.Sprintf("note: %.0f %% of the ticks are in functions of %s without a name (rows %s+0x...; it has no symbol table, names from %s): %s",
			100*float64(mt.Unnamed)/float64(total), mt.Module, baseOf(mt.Module), m.Source, where))
	}
	return out
}

func baseOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// rootShare is the minimum share of the user stacks that stop short of
// their thread's outermost frame above which post suggests DWARF
// unwinding.
const rootShare = 0.5

// outermost are the functions a thread's user stack ends in when it is
// whole: a program's start (C, ld.so), a thread's (glibc, musl), Go's.
var outermost = map[string]bool{
	"_start": true, "__libc_start_main": true, "__libc_start_call_main": true, "main": true, "_dl_start_user": true, "_dl_start": true,
	"clone": true, "clone3": true, "__clone": true, "__clone3": true, "start_thread": true, "thread_start": true, "start": true,
	"runtime.goexit": true, "runtime.goexit.abi0": true, "runtime.mstart": true, "runtime.mstart.abi0": true, "runtime.rt0_go": true, "runtime.rt0_go.abi0": true,
}

// rootHint says once, when most user call stacks walked by frame pointers
// stop before their thread's outermost frame (no _start, main or thread
// start below them) without passing through unmapped addresses (stackHint's
// case), that code without frame pointers ended the walk: libc's qsort
// calling a program's comparison function gives stacks "prog;cmp", which
// read as if the process's root called cmp. "" otherwise, and for stacks
// unwound by call-frame information.
func rootHint(rep *tprof.Report) string {
	if rep.StackTicks == 0 || rep.CFIStacks > 0 {
		return ""
	}
	var user, short uint64
	for _, s := range rep.Stacks() {
		if s.Truncated || len(s.Frames) == 0 || s.Frames[0].Kernel {
			continue
		}
		user += s.N
		if !outermost[s.Frames[0].Symbol] {
			short += s.N
		}
	}
	if user == 0 || float64(short) < rootShare*float64(user) {
		return ""
	}
	return fmt.Sprintf("note: %.0f %% of the user call stacks stop before their thread's first function (no _start, main or thread start below them): the frame-pointer walk ends at code built without frame pointers (-O2 builds, most distribution libraries), so those stacks lack their callers; DWARF unwinding recovers them (run.tprof --call-graph dwarf, or swtrace enable callstack --unwind dwarf)",
		100*float64(short)/float64(user))
}
