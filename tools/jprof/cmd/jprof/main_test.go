package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"perfinsp/internal/cliutil"
	"perfinsp/internal/testenv"
)

// The tests keep HOME and the caches in a temporary directory of their own.
func TestMain(m *testing.M) { testenv.Main(m) }

// A usage error (no pid, a mode that cannot attach, an unknown option, a
// bad value) is one line pointing to --help, exit 2, before jcmd is run.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "jprof: give the JVM's process id: --pid PID (jprof --help for more)\n"},
		{[]string{"--pid", "1", "calltree"}, "jprof: option \"calltree\": calltree needs the agent from the JVM's start (java -agentpath:libjprof.so=calltree...); attach with tprof, lock or wall (jprof --help for more)\n"},
		{[]string{"--pid", "1", "lokc"}, "jprof: unknown option \"lokc\": use tprof, lock, wall[=MS], jitdump, jstacks=off|HZ, sig, verbose (jprof --help for more)\n"},
		{[]string{"--pid", "1", "wall=0"}, "jprof: option \"wall=0\": wall=MS takes 1..60000 milliseconds (jprof --help for more)\n"},
		{[]string{"--pid", "1", "tprof,dir=/x"}, "jprof: option \"dir=/x\": give the directory with --dir (jprof --help for more)\n"},
		{[]string{"--pid", "1", "sig,verbose"}, "jprof: options \"sig,verbose\": name a mode: tprof, lock or wall (jprof --help for more)\n"},
		{[]string{"--pid", "1", "lock", "wall"}, "jprof: give the agent's options as one comma-separated list (tprof,lock,wall=20) (jprof --help for more)\n"},
		{[]string{"--pdi", "1"}, "jprof: unknown option --pdi: did you mean --pid? (jprof --help for more)\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := cliutil.Run(newApp(&stdout, &stderr), append([]string{"jprof"}, c.args...))
		if code != 2 || stderr.String() != c.want || stdout.Len() != 0 {
			t.Errorf("jprof %q: exit %d, stderr %q, stdout %q; want 2 and %q", c.args, code, stderr.String(), stdout.String(), c.want)
		}
	}
}

// Without a JDK: one line saying what to install, exit 1.
func TestNoJcmd(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("JAVA_HOME", t.TempDir())
	var stdout, stderr bytes.Buffer
	code := cliutil.Run(newApp(&stdout, &stderr), []string{"jprof", "--pid", strconv.Itoa(os.Getpid())})
	want := "jprof: no jcmd in $JAVA_HOME/bin or on the PATH: install a JDK (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME\n"
	if code != 1 || stderr.String() != want {
		t.Errorf("jprof with no jcmd: exit %d, stderr %q; want 1 and %q", code, stderr.String(), want)
	}
}

// The options jcmd passes: the default mode, dir= appended, and the
// outputs each kind writes.
func TestOptions(t *testing.T) {
	o, err := parseOptions("")
	if err != nil || o.agentString("") != "tprof" {
		t.Errorf("no options: %q %v, want tprof", o, err)
	}
	o, err = parseOptions("tprof,jitdump,wall=20,sig")
	if err != nil || o.agentString("/d") != "tprof,jitdump,wall=20,sig,dir=/d" {
		t.Fatalf("options: %q %v", o.agentString("/d"), err)
	}
	var got []string
	for _, out := range o.outputs("/d", 7) {
		got = append(got, out.path)
	}
	want := "/d/jprof-7.jstk /d/jit-7.dump /d/jprof-7.pb.gz /d/jprof-7-wall.folded"
	if strings.Join(got, " ") != want {
		t.Errorf("outputs %q, want %q", got, want)
	}
	if o, _ := parseOptions("tprof,jstacks=off"); len(o.outputs("/d", 7)) != 0 {
		t.Errorf("tprof,jstacks=off names outputs: %v", o.outputs("/d", 7))
	}
}

// jcmd's failure comes out as its exception's message.
func TestJcmdReason(t *testing.T) {
	text := "27135:\njava.io.IOException: well-known file /tmp/.java_pid27135 is not secure: owned by 0\n\tat jdk.attach/sun.tools.attach.VirtualMachineImpl.checkPermissions(Native Method)\n"
	if got := jcmdReason(text); got != "well-known file /tmp/.java_pid27135 is not secure: owned by 0" {
		t.Errorf("jcmdReason: %q", got)
	}
}
