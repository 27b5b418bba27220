package continuous

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestContainerIDAsRegexp: containerID finds what the last match of
// [0-9a-f]{64} is, on cgroup lines of containers and on runs of hex
// digits of every length around the bound.
func TestContainerIDAsRegexp(t *testing.T) {
	re := regexp.MustCompile(`[0-9a-f]{64}`)
	want := func(b []byte) string {
		ids := re.FindAll(b, -1)
		if len(ids) == 0 {
			return ""
		}
		return string(ids[len(ids)-1])
	}
	id := strings.Repeat("0123456789abcdef", 4)
	cases := []string{
		"",
		"0::/\n",
		"0::/system.slice/docker-" + id + ".scope\n",
		"0::/kubepods/besteffort/pod1/" + id + "\n12:cpu:/docker/" + strings.ToUpper(id) + "\n",
		"0::/" + id[:63] + "\n",
		"0::/" + id + "f\n",
		"0::/" + id + id + "a\n",
		"1:x:/" + id + "\n0::/" + strings.Replace(id, "a", "b", -1) + "/child\n",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "0123456789abcdefABx/\n"
	for i := 0; i < 2000; i++ {
		b := make([]byte, rng.IntN(300))
		for j := range b {
			if rng.IntN(10) == 0 {
				b[j] = alphabet[rng.IntN(len(alphabet))]
			} else {
				b[j] = "0123456789abcdef"[rng.IntN(16)]
			}
		}
		cases = append(cases, string(b))
	}
	for _, c := range cases {
		if got, w := containerID([]byte(c)), want([]byte(c)); got != w {
			t.Fatalf("containerID(%q) = %q, want %q", c, got, w)
		}
	}
}

// TestProcInfoFromProc: a process's information is read from its stat,
// exe, environ (the last OTEL_SERVICE_NAME) and cgroup files, and kept; a
// process whose stat cannot be read is gone: nothing else of it is read,
// and it is not kept.
func TestProcInfoFromProc(t *testing.T) {
	proc := t.TempDir()
	id := strings.Repeat("fedcba9876543210", 4)
	mk := func(pid string, stat bool) {
		dir := filepath.Join(proc, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		files := map[string]string{
			"environ": "A=1\x00OTEL_SERVICE_NAME=first\x00B=2\x00OTEL_SERVICE_NAME=checkout\x00OTEL_SERVICE_NAME=\x00",
			"cgroup":  "0::/system.slice/docker-" + id + ".scope\n",
		}
		if stat {
			files["stat"] = pid + " (my (prog)) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21\n"
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("/usr/bin/my prog (deleted)", filepath.Join(dir, "exe")); err != nil {
			t.Fatal(err)
		}
	}
	mk("42", true)
	mk("43", false)
	p := newProcInfos()
	p.proc = proc
	got := p.get(42)
	want := procInfo{start: "987654", exePath: "/usr/bin/my prog", exeName: "my prog", service: "checkout", container: id}
	if *got != want {
		t.Errorf("pid 42: %+v, want %+v", *got, want)
	}
	if p.get(42) != got {
		t.Error("pid 42 read again, want it kept")
	}
	if gone := p.get(43); *gone != (procInfo{}) {
		t.Errorf("pid 43 without a stat file: %+v, want nothing read", *gone)
	}
	if _, ok := p.m[43]; ok {
		t.Error("pid 43 kept")
	}
}
