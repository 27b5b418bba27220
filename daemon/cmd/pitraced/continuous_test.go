package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"perfinsp/daemon/otlpexport/otlptest"
	"perfinsp/internal/testenv"
)

func buildPitraced(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Missing(t, "pitraced continuous samples every CPU: run the tests as root")
	}
	bin := filepath.Join(t.TempDir(), "pitraced")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func writeFile(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// TestContinuousConfigFile: pitraced continuous reads its endpoint, rate,
// interval, bearer token and off-cpu from a root-owned file, sends the samples of a
// busy process of its own to the receiver with the token, says so on
// stderr, and at SIGTERM sends the last interval and exits; a flag on the
// command line wins over the file.
func TestContinuousConfigFile(t *testing.T) {
	bin := buildPitraced(t)
	dir := t.TempDir()
	rcv := otlptest.Start(t)
	tok := filepath.Join(dir, "token")
	writeFile(t, tok, "s3cret\n", 0o600)
	// A busy shell loop: the profile must name it.
	busy := exec.Command("sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = busy.Process.Kill(); _ = busy.Wait() }()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", busy.Process.Pid)) // sh may be a link to dash
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "continuous.conf")
	writeFile(t, conf, fmt.Sprintf("# test\nendpoint = %s\nrate = 5\ninterval = 1s\noff-cpu = true\nbearer-token-file = %s\nservice = %s=shell-svc\nsymbol-cache = %s\nspool-dir = %s\n",
		rcv.HTTPURL, tok, filepath.Base(exe), filepath.Join(dir, "a2n"), filepath.Join(dir, "spool")), 0o600)
	cmd := exec.Command(bin, "continuous", "--config", conf, "--rate", "199")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Until the busy loop's samples arrive (199 Hz from the command line,
	// not 5 from the file: 100 samples are half a second of its CPU time).
	busySamples := func(ps []pprofile.Profiles) otlptest.Summary {
		return otlptest.Summarize(ps, func(m pcommon.Map) bool {
			v, ok := m.Get("process.pid")
			return ok && v.Int() == int64(busy.Process.Pid)
		})
	}
	rcv.WaitFor(t, 120*time.Second, "100 samples of the busy shell", func(ps []pprofile.Profiles) bool { return busySamples(ps).Total >= 100 })
	// The receiver's own goroutines, at least, sleep between requests.
	rcv.WaitFor(t, 60*time.Second, "off-CPU time (off-cpu = true)", func(ps []pprofile.Profiles) bool {
		return otlptest.SummarizeType(ps, "off_cpu", func(pcommon.Map) bool { return true }).Total > 0
	})
	_ = cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("pitraced continuous: %v\n%s", err, stderr.String())
	}
	t.Logf("stderr:\n%s", stderr.String())
	got, _ := rcv.Received()
	s := busySamples(got)
	if svc := s.Resources[0]["service.name"]; svc != "shell-svc" {
		t.Errorf("service.name %v, want shell-svc from the service mapping", svc)
	}
	if !strings.Contains(stderr.String(), "at 199 Hz and off-CPU time") || !strings.Contains(stderr.String(), "every 1s") {
		t.Errorf("stderr does not show the rate of the flag and the interval of the file:\n%s", stderr.String())
	}
	m := regexp.MustCompile(`stopped after \d+ intervals: (\d+) samples, (\d+) sent`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no closing line:\n%s", stderr.String())
	}
	all := otlptest.Summarize(got, func(pcommon.Map) bool { return true })
	if sent, _ := strconv.ParseInt(m[2], 10, 64); sent != all.Total || m[1] != m[2] {
		t.Errorf("the agent says %s samples, %s sent; the receiver got %d", m[1], m[2], all.Total)
	}
	if rcv.Authorization() != "Bearer s3cret" {
		t.Errorf("Authorization %q, want the token of the file", rcv.Authorization())
	}
}

// TestContinuousRefusesUnsafeFiles: a configuration or token file others
// may write or read, and unknown settings, are refused with a line saying
// what to do; nothing is sent.
func TestContinuousRefusesUnsafeFiles(t *testing.T) {
	bin := buildPitraced(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "c.conf")
	tok := filepath.Join(dir, "tok")
	for _, c := range []struct {
		conf, tok string
		mode      os.FileMode
		want      string
	}{
		{"endpoint = http://127.0.0.1:9\n", "", 0o666, "chmod go-w"},
		{"endpoint = http://127.0.0.1:9\nbogus = 1\n", "", 0o600, `unknown setting "bogus"`},
		{"endpoint = http://127.0.0.1:9\nbearer-token-file = " + tok + "\n", "t\n", 0o600, "readable by no one else"},
	} {
		writeFile(t, conf, c.conf, c.mode)
		if c.tok != "" {
			writeFile(t, tok, c.tok, 0o644)
		}
		out, err := exec.Command(bin, "continuous", "--config", conf, "--duration", "1s").CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
			t.Errorf("config %q (mode %v): %v, output %q: want one line with %q", c.conf, c.mode, err, out, c.want)
		}
	}
}

// TestContinuousEndpointDown: with nothing listening the agent samples on,
// counts the samples it cannot deliver, says why, and exits cleanly.
func TestContinuousEndpointDown(t *testing.T) {
	bin := buildPitraced(t)
	rcv := otlptest.Start(t)
	rcv.Stop()
	cmd := exec.Command(bin, "continuous", "--endpoint", rcv.HTTPURL, "--interval", "500ms", "--queue-bytes", "4M",
		"--symbol-cache", "", "--timeout", "200ms", "--duration", "3s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	// Something to sample on an idle machine: this process, busy until
	// the agent exits.
	done := make(chan struct{})
	go func() {
		for x := 0; ; x++ {
			select {
			case <-done:
				return
			default:
			}
			for i := 0; i < 1e5; i++ {
				x = x*31 + i
			}
		}
	}()
	start := time.Now()
	err := cmd.Run()
	close(done)
	if err != nil {
		t.Fatalf("pitraced continuous with the endpoint down: %v\n%s", err, stderr.String())
	}
	t.Logf("%v\n%s", time.Since(start), stderr.String())
	// Nothing could be sent and there is no spool: every sample is counted
	// as dropped, whatever the machine's load let the agent take.
	m := regexp.MustCompile(`stopped after \d+ intervals: (\d+) samples, 0 sent in 0 requests \(0 bytes\), (\d+) samples dropped by the exporter`).FindStringSubmatch(stderr.String())
	if m == nil || m[1] != m[2] || m[1] == "0" {
		t.Errorf("want a closing line with every sample (some) dropped, none sent:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "connection refused") {
		t.Errorf("the log does not say why sending fails:\n%s", stderr.String())
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("a 3 s run took %v with the endpoint down", d)
	}
}
