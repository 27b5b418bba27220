package tprof

// pcMemo is the located PCs of one process state (counter.locateStacks):
// an open-addressed table kept from state to state, whose slots hold a
// stamp of the state that wrote them, so a new state begins with no
// table made or cleared. A trace of many short processes has a hundred
// thousand states: a map made for each was fresh memory each time, its
// first writes page faults.
type pcMemo struct {
	keys  []uint64
	vals  []int32
	stamp []uint32 // the state of the slot's entry (cur: this one's)
	cur   uint32
	n     int // entries of this state
}

// reset begins a new state: the table is then empty.
func (m *pcMemo) reset() {
	m.cur++
	m.n = 0
	if m.cur == 0 { // (the stamps wrapped: none may look current)
		clear(m.stamp)
		m.cur = 1
	}
}

// slot is the slot of pc: its entry's, or the empty one where it goes.
func (m *pcMemo) slot(pc uint64) int {
	mask := len(m.keys) - 1
	for i := int((pc*0x9e3779b97f4a7c15)>>32) & mask; ; i = (i + 1) & mask {
		if m.stamp[i] != m.cur || m.keys[i] == pc {
			return i
		}
	}
}

// get is pc's value in this state.
func (m *pcMemo) get(pc uint64) (int32, bool) {
	if m.n == 0 {
		return 0, false
	}
	i := m.slot(pc)
	if m.stamp[i] != m.cur {
		return 0, false
	}
	return m.vals[i], true
}

// put sets pc's value in this state (pc not in it), growing the table
// at half full.
func (m *pcMemo) put(pc uint64, v int32) {
	if 2*(m.n+1) > len(m.keys) {
		m.grow()
	}
	i := m.slot(pc)
	m.keys[i], m.vals[i], m.stamp[i] = pc, v, m.cur
	m.n++
}

func (m *pcMemo) grow() {
	keys, vals, stamp, cur := m.keys, m.vals, m.stamp, m.cur
	n := max(2*len(keys), 256)
	m.keys, m.vals, m.stamp = make([]uint64, n), make([]int32, n), make([]uint32, n)
	m.cur = 1
	for i, s := range stamp {
		if s == cur {
			j := m.slot(keys[i])
			m.keys[j], m.vals[j], m.stamp[j] = keys[i], vals[i], 1
		}
	}
}
