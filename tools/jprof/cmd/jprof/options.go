package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// options are the agent's options for an attach, checked here so that a
// mistake is a usage error on jprof's stderr, not a refusal on the JVM's.
type options []string

func parseOptions(s string) (options, error) {
	if s == "" {
		return options{"tprof"}, nil
	}
	var o options
	mode := false
	for _, tok := range strings.Split(s, ",") {
		name, val, hasVal := strings.Cut(tok, "=")
		switch {
		case tok == "tprof" || tok == "lock" || tok == "wall":
			mode = true
		case name == "wall" && hasVal:
			if n, err := strconv.Atoi(val); err != nil || n < 1 || n > 60000 {
				return nil, fmt.Errorf("option %q: wall=MS takes 1..60000 milliseconds", tok)
			}
			mode = true
		case name == "jstacks" && hasVal:
			if n, err := strconv.Atoi(val); val != "off" && (err != nil || n < 1 || n > 10000) {
				return nil, fmt.Errorf("option %q: jstacks= takes off or 1..10000 Hz", tok)
			}
		case tok == "jitdump" || tok == "sig" || tok == "verbose":
		case name == "calltree" || name == "trace":
			return nil, fmt.Errorf("option %q: calltree needs the agent from the JVM's start (java -agentpath:libjprof.so=calltree...); attach with tprof, lock or wall", tok)
		case name == "dir":
			return nil, fmt.Errorf("option %q: give the directory with --dir", tok)
		case tok == "stop":
			return nil, fmt.Errorf("option \"stop\": jprof stops the agent itself at its end")
		case tok == "flush":
			return nil, fmt.Errorf("option \"flush\": use --flush")
		default:
			return nil, fmt.Errorf("unknown option %q: use tprof, lock, wall[=MS], jitdump, jstacks=off|HZ, sig, verbose", tok)
		}
		o = append(o, tok)
	}
	if !mode {
		return nil, fmt.Errorf("options %q: name a mode: tprof, lock or wall", s)
	}
	return o, nil
}

func (o options) String() string { return strings.Join(o, ",") }

func (o options) has(name string) bool {
	for _, t := range o {
		if t == name || strings.HasPrefix(t, name+"=") {
			return true
		}
	}
	return false
}

// agentString is the option list jcmd passes, with dir= when dir is set.
func (o options) agentString(dir string) string {
	s := o.String()
	if dir != "" {
		s += ",dir=" + dir
	}
	return s
}

// output is a file the agent writes; atEnd: at its stop or the JVM's end
// (others are written as it runs).
type output struct {
	what, path string
	atEnd      bool
}

func (o options) outputs(dir string, pid int) []output {
	p := strconv.Itoa(pid)
	var out []output
	if o.has("tprof") && !o.has("jstacks=off") {
		out = append(out, output{"Java stacks (post --perfmap-dir)", filepath.Join(dir, "jprof-"+p+".jstk"), false})
	}
	if o.has("tprof") && o.has("jitdump") {
		out = append(out, output{"jitdump (perf inject --jit)", filepath.Join(dir, "jit-"+p+".dump"), false})
	}
	if o.has("lock") || o.has("wall") {
		out = append(out, output{"pprof profile (go tool pprof)", filepath.Join(dir, "jprof-"+p+".pb.gz"), true})
	}
	if o.has("lock") {
		out = append(out, output{"lock folded stacks", filepath.Join(dir, "jprof-"+p+"-lock.folded"), true})
	}
	if o.has("wall") {
		out = append(out, output{"wall folded stacks", filepath.Join(dir, "jprof-"+p+"-wall.folded"), true})
	}
	return out
}
