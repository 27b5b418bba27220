package calltree

import (
	"testing"

	"perfinsp/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Of gives one id per distinct (parent, name, module), the same each
// time it is asked, through its table's growth (tens of thousands of
// frames, many keys alike but in one field), as a map of the keys gives.
func TestOfDistinctThroughGrowth(t *testing.T) {
	var tr Tree
	want := map[Frame]int32{}
	for round := range 2 {
		for p := range 300 {
			for n := range 40 {
				for c := range 3 {
					k := Frame{int32(p), int32(n), int32(c * 7)}
					id := tr.Of(k.Parent, k.Name, k.Mod)
					if old, ok := want[k]; ok && old != id {
						t.Fatalf("round %d: frame %+v is %d, was %d", round, k, id, old)
					}
					if round == 0 && int(id) != len(want)+1 {
						t.Fatalf("new frame %+v is %d, want %d", k, id, len(want)+1)
					}
					want[k] = id
				}
			}
		}
	}
	if tr.Len() != len(want) {
		t.Fatalf("%d frames kept, want %d", tr.Len(), len(want))
	}
	for i := range tr.Len() {
		f := tr.Frame(int32(i + 1))
		if want[f] != int32(i+1) {
			t.Fatalf("frame %d is %+v, whose id is %d", i+1, f, want[f])
		}
	}
}
