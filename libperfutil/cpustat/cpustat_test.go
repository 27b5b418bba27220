package cpustat

import (
	"math"
	"testing"
)

const stat1 = `cpu  100 0 50 1000 0 5 5 0 0 0
cpu0 60 0 30 400 0 5 5 0 0 0
cpu1 40 0 20 600 0 0 0 0 0 0
intr 12345
`
const stat2 = `cpu  400 0 150 1200 0 15 35 0 0 0
cpu0 360 0 130 400 0 15 35 0 0 0
cpu1 40 0 20 800 0 0 0 0 0 0
intr 22345
`

func TestBetween(t *testing.T) {
	a, err := Parse([]byte(stat1))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Parse([]byte(stat2))
	if err != nil {
		t.Fatal(err)
	}
	sh := Between(a, b)
	if len(sh) != 3 || sh[1].Name != "cpu0" {
		t.Fatalf("%+v", sh)
	}
	// cpu0: busy 300+100 = 400, idle 0, intr 10+30 = 40 -> 440 ticks.
	c0 := sh[1]
	if c0.AllTicks != 440 || math.Abs(c0.Busy-100*400.0/440) > 1e-9 || math.Abs(c0.Intr-100*40.0/440) > 1e-9 || c0.Idle != 0 {
		t.Fatalf("cpu0 %+v", c0)
	}
	if c1 := sh[2]; c1.Idle != 100 || c1.Busy != 0 {
		t.Fatalf("cpu1 %+v", c1)
	}
	for _, s := range sh {
		if s.AllTicks > 0 && math.Abs(s.Busy+s.Idle+s.Intr-100) > 1e-9 {
			t.Fatalf("%s shares do not add to 100: %+v", s.Name, s)
		}
	}
}

func TestParseBad(t *testing.T) {
	for _, bad := range []string{"", "intr 5\n", "cpu0 1 2 3\n", "cpu0 1 2 3 x 5 6 7 8\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestReadLive(t *testing.T) {
	s, err := Read()
	if err != nil {
		t.Fatal(err)
	}
	if s.Names[0] != "cpu" || len(s.Names) < 2 {
		t.Fatalf("names %v", s.Names)
	}
}
