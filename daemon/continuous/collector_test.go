package continuous

import (
	"bytes"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"perfinsp/daemon/otlpexport"
	"perfinsp/daemon/otlpexport/otlptest"
)

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// buildCollector builds the test collector (testdata/otelcol: a module of
// its own, the Collector's published modules at one release).
func buildCollector(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "otelcol")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("testdata", "otelcol")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the test collector (needs the Go module proxy the first time): %v\n%s", err, out)
	}
	return bin
}

// startCollector starts the test collector (its OTLP receiver on free
// loopback ports, the profiles feature gate on), forwarding what it
// receives to rcv with its OTLP/HTTP exporter, and returns its OTLP/HTTP
// endpoint once it listens. It is stopped when the test ends.
func startCollector(t *testing.T, col string, rcv *otlptest.Receiver) string {
	t.Helper()
	dir := t.TempDir()
	httpPort, grpcPort := freePort(t), freePort(t)
	conf := filepath.Join(dir, "otelcol.yaml")
	yaml := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
      grpc:
        endpoint: 127.0.0.1:%d
exporters:
  otlphttp:
    endpoint: %s
    compression: none
  debug:
    verbosity: basic
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [otlphttp, debug]
`, httpPort, grpcPort, rcv.HTTPURL)
	if err := os.WriteFile(conf, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var colOut bytes.Buffer
	cmd := exec.Command(col, "--config", conf, "--feature-gates=+service.profilesSupport")
	cmd.Stdout, cmd.Stderr = &colOut, &colOut
	cmd.Env = append(os.Environ(), "HOME="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("collector output:\n%s", colOut.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", httpPort))
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the collector does not listen after 60 s:\n%s", colOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", httpPort)
}

// TestThroughCollector: the agent sends OTLP/HTTP to a real OpenTelemetry
// Collector (OTLP receiver, profiles feature gate) that forwards with its
// OTLP/HTTP exporter to the in-process receiver: what arrives there names
// heavy, medium and light in cpuburn's proportions, carries the resource
// attributes, and holds every sample the agent sent.
func TestThroughCollector(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	col := buildCollector(t, dir)
	burn := buildBurn(t, dir)
	rcv := otlptest.Start(t)
	endpoint := startCollector(t, col, rcv)
	stop := runAgent(t, Config{RateHz: 499, Interval: time.Second,
		Export: otlpexport.Config{Protocol: "http", Endpoint: endpoint}})
	run := exec.Command(burn, "300")
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	pid := run.Process.Pid
	if err := run.Wait(); err != nil {
		t.Fatal(err)
	}
	st := stop()
	if st.Export.Sent == 0 || st.Export.Dropped != 0 {
		t.Fatalf("the agent's export to the collector: %+v", st.Export)
	}
	// The collector forwards on its own schedule: wait for every sample.
	got := rcv.WaitFor(t, 60*time.Second, fmt.Sprintf("the %d samples sent, forwarded", st.Export.SentSamples), func(ps []pprofile.Profiles) bool {
		return otlptest.Summarize(ps, func(pcommon.Map) bool { return true }).Total >= int64(st.Export.SentSamples)
	})
	all := otlptest.Summarize(got, func(pcommon.Map) bool { return true })
	if all.Total != int64(st.Export.SentSamples) {
		t.Errorf("%d samples forwarded by the collector, %d sent to it", all.Total, st.Export.SentSamples)
	}
	s := otlptest.Summarize(got, byPID(pid))
	trio := s.Inclusive["heavy"] + s.Inclusive["medium"] + s.Inclusive["light"]
	if s.Total < 300 || trio == 0 {
		t.Fatalf("%d samples of cpuburn (pid %d) through the collector", s.Total, pid)
	}
	for fn, want := range map[string]float64{"heavy": 60, "medium": 30, "light": 10} {
		rel := 100 * float64(s.Inclusive[fn]) / float64(trio)
		t.Logf("%-6s %5.1f %% of heavy+medium+light (%d samples of cpuburn, through the collector)", fn, rel, s.Total)
		if math.Abs(rel-want) > 4 {
			t.Errorf("%s: %.1f %%, want %v within 4 points", fn, rel, want)
		}
	}
	r := s.Resources[0]
	for _, k := range []string{"host.name", "process.pid", "process.executable.name", "service.name", "process.executable.path"} {
		if _, ok := r[k]; !ok {
			t.Errorf("resource attribute %s lost on the way: %v", k, r)
		}
	}
}
