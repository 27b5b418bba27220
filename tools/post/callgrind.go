package main

import (
	"perfinsp/analysis/a2n"
	"perfinsp/analysis/itrace"
)

// callgrindOptions is the callgrind file's header: the traced command
// (the process whose threads ran the most instructions, by its name at
// the end of the trace), its pid and the trace file, and the instruction
// positions of blocks.
func callgrindOptions(rep *itrace.Report, r *a2n.Resolver, trace string, blocks *itrace.Blocks) itrace.CallgrindOptions {
	o := itrace.CallgrindOptions{Cmd: trace, Trace: trace, Blocks: blocks}
	if pid, ok := rep.BusiestProcess(); ok {
		o.Cmd, o.PID = r.ProcessName(pid), pid
	}
	return o
}

// FileAddr is where a user address of pid is in its module's ELF file,
// as of the record being replayed: the virtual address the file gives it
// (what objdump shows), for callgrind's instruction positions.
func (n *a2nNamer) FileAddr(pid uint32, addr uint64) (uint64, bool) {
	l := n.r.Locate(pid, addr, false)
	if l.Module() == "" {
		return 0, false
	}
	m := n.r.LocModule(l)
	if m == nil || m.Err != nil {
		return 0, false
	}
	return m.VAddr(l.FileOffset())
}
