package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// attacher loads the agent into one JVM through jcmd.
type attacher struct {
	pid   int
	jcmd  string // the jcmd program
	agent string // the agent library, absolute
	dir   string // the outputs' directory, absolute ("" the agent's default)
}

func newAttacher(pid int, agent, dir string) (*attacher, error) {
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err != nil {
		return nil, fmt.Errorf("no process %d", pid)
	}
	jcmd, err := findJcmd()
	if err != nil {
		return nil, err
	}
	agent, err = findAgent(agent)
	if err != nil {
		return nil, err
	}
	dir, err = absDir(dir)
	if err != nil {
		return nil, err
	}
	return &attacher{pid: pid, jcmd: jcmd, agent: agent, dir: dir}, nil
}

// findJcmd is $JAVA_HOME/bin/jcmd, else jcmd on the PATH.
func findJcmd() (string, error) {
	if home := os.Getenv("JAVA_HOME"); home != "" {
		p := filepath.Join(home, "bin", "jcmd")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath("jcmd"); err == nil {
		return p, nil
	}
	return "", errors.New("no jcmd in $JAVA_HOME/bin or on the PATH: install a JDK (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME")
}

// findAgent is the library given, else libjprof.so next to this program.
func findAgent(given string) (string, error) {
	if given == "" {
		exe, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("finding the agent next to jprof: %w (give --agent PATH)", err)
		}
		given = filepath.Join(filepath.Dir(exe), "libjprof.so")
		if _, err := os.Stat(given); err != nil {
			return "", fmt.Errorf("no libjprof.so next to jprof (%s): build it with make jprof, or give --agent PATH", filepath.Dir(exe))
		}
	}
	abs, err := filepath.Abs(given)
	if err != nil {
		return "", fmt.Errorf("--agent %s: %w", given, err)
	}
	if st, err := os.Stat(abs); err != nil || !st.Mode().IsRegular() {
		return "", fmt.Errorf("--agent %s: not a library file", abs)
	}
	if strings.ContainsAny(abs, " \"") {
		return "", fmt.Errorf("--agent %s: jcmd cannot pass a path with a space or a quote", abs)
	}
	return abs, nil
}

// load runs jcmd PID JVMTI.agent_load AGENT OPTS. jcmd splits an unquoted
// argument at "=", hence the quotes.
func (a *attacher) load(opts string) error {
	arg := opts
	if strings.Contains(opts, "=") {
		arg = `"` + opts + `"`
	}
	cmd := exec.Command(a.jcmd, strconv.Itoa(a.pid), "JVMTI.agent_load", a.agent, arg)
	out, err := cmd.CombinedOutput()
	text := string(out)
	if err == nil && strings.Contains(text, "return code: 0") {
		return nil
	}
	if strings.Contains(text, "return code: ") {
		return fmt.Errorf("the agent in pid %d refused %q: its reason is on the JVM's stderr", a.pid, opts)
	}
	why := jcmdReason(text)
	if why == "" && err != nil {
		why = err.Error()
	}
	if uid, ok := procUID(a.pid); ok && uid != os.Geteuid() && os.Geteuid() != 0 {
		return fmt.Errorf("cannot attach to pid %d: it runs as uid %d, you are uid %d, and a JVM takes an attach from its own user (or root) only: run jprof as that user (jcmd: %s)", a.pid, uid, os.Geteuid(), why)
	}
	return fmt.Errorf("cannot attach to pid %d: %s", a.pid, why)
}

// jcmdReason is the message of the exception jcmd printed, or its last line.
func jcmdReason(text string) string {
	last := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "at ") || strings.HasSuffix(l, ":") && !strings.Contains(l, " ") {
			continue
		}
		if i := strings.Index(l, "Exception: "); i >= 0 {
			return l[i+len("Exception: "):]
		}
		last = l
	}
	return last
}

// procUID is the real uid of pid.
func procUID(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Uid:" {
			uid, err := strconv.Atoi(f[1])
			return uid, err == nil
		}
	}
	return 0, false
}

// watchExit returns a channel closed when the JVM ends: a pidfd, which
// becomes readable then, or where the kernel has none a look every 200 ms.
func (a *attacher) watchExit() <-chan struct{} {
	done := make(chan struct{})
	fd, err := unix.PidfdOpen(a.pid, 0)
	go func() {
		defer close(done)
		if err == nil {
			defer unix.Close(fd)
			for {
				fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				if _, err := unix.Poll(fds, -1); err == nil || !errors.Is(err, unix.EINTR) {
					return
				}
			}
		}
		for unix.Kill(a.pid, 0) == nil || errors.Is(unix.Kill(a.pid, 0), unix.EPERM) {
			time.Sleep(200 * time.Millisecond)
		}
	}()
	return done
}
