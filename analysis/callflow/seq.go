package callflow

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Transitions of an event (the T of a sequence key).
const (
	TransEnter   = 0
	TransExit    = 1
	TransExcExit = 2 // exception exit (PI's third transition)
)

// SeqKey is the width of the sequence-minima key (the overhead-compensation
// patent; PI's paper §4.1):
// the interval between two events is keyed M1 –T1→ M2 –T2→ M3 (the method
// before the first event, its transition, the method charged, the second
// event's transition, the method after it), with Types method types and
// Trans transitions: PI's 8 × 3 (4608 keys), the patent's 6 × 2 (864), or
// 1 × 2 (transitions only).
type SeqKey struct {
	Types, Trans int
}

// Key widths supported by --seq-key.
var (
	SeqKeyPI       = SeqKey{8, 3}
	SeqKeyPatent   = SeqKey{6, 2} // "Compensating for instrumentation overhead using sequences of events": six method types, two transitions
	SeqKeyKindOnly = SeqKey{1, 2}
)

// ParseSeqKey reads "TYPESxTRANS": 8x3, 8x2, 6x3, 6x2, 1x3, 1x2.
func ParseSeqKey(s string) (SeqKey, error) {
	var k SeqKey
	if n, err := fmt.Sscanf(s, "%dx%d", &k.Types, &k.Trans); n != 2 || err != nil ||
		(k.Types != 8 && k.Types != 6 && k.Types != 1) || (k.Trans != 2 && k.Trans != 3) {
		return SeqKey{}, fmt.Errorf("sequence key %q: use TYPESxTRANSITIONS with 8, 6 or 1 types and 3 or 2 transitions (8x3 is PI's, 6x2 the 6 Java types x entry/exit)", s)
	}
	return k, nil
}

func (k SeqKey) String() string { return fmt.Sprintf("%dx%d", k.Types, k.Trans) }

// Size is the number of keys.
func (k SeqKey) Size() int { return k.Types * k.Trans * k.Types * k.Trans * k.Types }

// typ maps a recorded method type (0..7) to the key's: all 8; the
// patent's 6 Java types 1..6 (0 and 7 counted as 1, jitted); or one.
func (k SeqKey) typ(t uint8) int {
	switch k.Types {
	case 8:
		return int(t & TypeMask)
	case 6:
		if t >= 1 && t <= 6 {
			return int(t) - 1
		}
		return 0
	}
	return 0
}

func (k SeqKey) trans(t int) int {
	if t == TransExcExit && k.Trans == 2 {
		return TransExit
	}
	return t
}

// Of is the key of M1 –T1→ M2 –T2→ M3.
func (k SeqKey) Of(m1 uint8, t1 int, m2 uint8, t2 int, m3 uint8) int {
	x := k.typ(m1)
	x = x*k.Trans + k.trans(t1)
	x = x*k.Types + k.typ(m2)
	x = x*k.Trans + k.trans(t2)
	return x*k.Types + k.typ(m3)
}

var typeNames = [NumTypes]string{"other", "jitted", "jitted-static", "interp", "interp-static", "native", "native-static", "compiling"}
var transNames = [3]string{"En", "Ex", "Xx"}

// Name spells a key: "En-other-Ex" style, M1 T1 M2 T2 M3.
func (k SeqKey) Name(key int) string {
	var p [5]int
	for i := 4; i >= 0; i-- {
		w := k.Types
		if i%2 == 1 {
			w = k.Trans
		}
		p[i] = key % w
		key /= w
	}
	tn := func(v int) string {
		switch k.Types {
		case 8:
			return typeNames[v]
		case 6:
			return typeNames[v+1]
		}
		return "*"
	}
	return strings.Join([]string{tn(p[0]), transNames[p[1]], tn(p[2]), transNames[p[3]], tn(p[4])}, "-")
}

// Minima is the minimum interval seen per sequence key, and how often
// each key was seen.
type Minima struct {
	Trained bool // merged with a training file
	// Env, when set, is the environmental overhead per key (EnvFromArc):
	// an interval then loses Min - Env instead of Min (Env is capped at
	// Min; a key Env does not cover assumes EnvDefault).
	Env   *Minima
	Key   SeqKey
	Min   map[int]uint64
	Count map[int]uint64
}

// NewMinima is an empty table.
func NewMinima(k SeqKey) *Minima {
	return &Minima{Key: k, Min: map[int]uint64{}, Count: map[int]uint64{}}
}

// Add notes one interval of key s.
func (m *Minima) Add(s int, d uint64) {
	if c, ok := m.Min[s]; !ok || d < c {
		m.Min[s] = d
	}
	m.Count[s]++
}

// Keys returns the keys seen, in order.
func (m *Minima) Keys() []int {
	ks := make([]int, 0, len(m.Min))
	for k := range m.Min {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ks
}

// SequenceMinima is the first pass: the minimum interval per sequence key
// over every thread given.
func SequenceMinima(threads []*Thread, k SeqKey) *Minima {
	m, _ := SequenceMinimaErr(threads, k)
	return m
}

// SequenceMinimaErr is SequenceMinima with the first error reading a
// thread file (the minima then cover what was read).
func SequenceMinimaErr(threads []*Thread, k SeqKey) (*Minima, error) {
	// by key in arrays while the events stream (an interval each), then
	// into the table
	low, count := make([]uint64, k.Size()), make([]uint64, k.Size())
	add := func(s int, d uint64) {
		if count[s] == 0 || d < low[s] {
			low[s] = d
		}
		count[s]++
	}
	var first error
	for _, t := range threads {
		if _, err := build(t, Calibration{}, add, k); err != nil && first == nil {
			first = err
		}
	}
	m := NewMinima(k)
	for s, c := range count {
		if c > 0 {
			m.Min[s], m.Count[s] = low[s], c
		}
	}
	return m, first
}

// Merge takes, per key, the lower minimum of m and o (the same key width),
// and adds o's counts: a trained table and this run's.
func (m *Minima) Merge(o *Minima) error {
	if o == nil {
		return nil
	}
	if o.Key != m.Key {
		return fmt.Errorf("sequence minima keyed %s cannot merge with a table keyed %s (use --seq-key %s)", o.Key, m.Key, o.Key)
	}
	for k, v := range o.Min {
		if c, ok := m.Min[k]; !ok || v < c {
			m.Min[k] = v
		}
		m.Count[k] += o.Count[k]
	}
	return nil
}

const minimaHeader = "# perfinsp hookit sequence minima"

// WriteMinima writes a training file: the key width, the metric (minima
// of another metric do not apply), then one line per key: index, minimum,
// times seen, name.
func WriteMinima(w io.Writer, m *Minima, metric string) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s\nkey %s\nmetric %s\n", minimaHeader, m.Key, metric)
	for _, k := range m.Keys() {
		fmt.Fprintf(bw, "%d %d %d %s\n", k, m.Min[k], m.Count[k], m.Key.Name(k))
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing the minima: %w", err)
	}
	return nil
}

// ReadMinima reads a training file written by WriteMinima; it returns the
// table and its metric.
func ReadMinima(r io.Reader) (*Minima, string, error) {
	sc := bufio.NewScanner(r)
	var m *Minima
	metric := ""
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		switch {
		case line == 1:
			if sc.Text() != minimaHeader {
				return nil, "", fmt.Errorf("not a hookit minima file (first line %q)", sc.Text())
			}
		case len(f) == 2 && f[0] == "key":
			k, err := ParseSeqKey(f[1])
			if err != nil {
				return nil, "", fmt.Errorf("minima line %d: %w", line, err)
			}
			m = NewMinima(k)
		case len(f) == 2 && f[0] == "metric":
			metric = f[1]
		case len(f) >= 3 && m != nil:
			k, e1 := strconv.Atoi(f[0])
			v, e2 := strconv.ParseUint(f[1], 10, 64)
			c, e3 := strconv.ParseUint(f[2], 10, 64)
			if e1 != nil || e2 != nil || e3 != nil || k < 0 || k >= m.Key.Size() {
				return nil, "", fmt.Errorf("minima line %d: want INDEX MIN COUNT NAME, got %q", line, sc.Text())
			}
			m.Min[k], m.Count[k] = v, c
		default:
			return nil, "", fmt.Errorf("minima line %d: unexpected %q", line, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", fmt.Errorf("reading the minima: %w", err)
	}
	if m == nil || metric == "" {
		return nil, "", fmt.Errorf("minima file without its key and metric lines")
	}
	return m, metric, nil
}

// Off is what the calibration takes off an interval of key s: the
// minimum, less the environmental overhead when Env is set.
func (m *Minima) Off(s int) uint64 {
	v := m.Min[s]
	if m.Env != nil {
		e, ok := m.Env.Min[s]
		if !ok {
			e = EnvDefault
		}
		v -= min(e, v)
	}
	return v
}
