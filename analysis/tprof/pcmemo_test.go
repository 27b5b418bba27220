package tprof

import "testing"

// The table of located PCs kept from state to state: each state begins
// empty whatever the last held, and holds what was put in it across its
// growth.
func TestPCMemoStates(t *testing.T) {
	var m pcMemo
	for state := range 5 {
		m.reset()
		n := 10 << (2 * state) // 10, 40, ... 2560: grown inside states
		for i := range n {
			pc := uint64(0x400000 + 16*i)
			if _, ok := m.get(pc); ok {
				t.Fatalf("state %d: pc %#x found before it was put", state, pc)
			}
			m.put(pc, int32(i+state))
		}
		for i := range n {
			pc := uint64(0x400000 + 16*i)
			if v, ok := m.get(pc); !ok || v != int32(i+state) {
				t.Fatalf("state %d: pc %#x gives %d, %v; want %d", state, pc, v, ok, i+state)
			}
		}
	}
	m.cur = ^uint32(0) // the stamps wrap at the next state
	m.reset()
	m.put(1, 1)
	for i := range 2560 {
		if _, ok := m.get(uint64(0x400000 + 16*i)); ok {
			t.Fatalf("after the stamps wrapped: pc %#x of an old state found", 0x400000+16*i)
		}
	}
}
