package ptthold

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Descriptor limits of the holders. Every perf counter is a descriptor of
// the agent's; the agent keeps a reserve for its control socket, its
// connections and its files, and bounds what each user's holder may take.
const (
	// ReserveFDs is kept back from every holder (plus an eighth of the
	// agent's descriptor limit).
	ReserveFDs = 512
	// MaxFDsPerUser caps one user's perf descriptors (root included: root
	// may take every descriptor not reserved).
	MaxFDsPerUser = 8192
)

// fdBudget counts the perf descriptors each user's holder holds.
type fdBudget struct {
	mu     sync.Mutex
	total  int
	perUID map[int]int
	limit  int // descriptors all holders may hold (0: not computed yet)
}

func (b *fdBudget) init() {
	if b.limit != 0 {
		return
	}
	var r unix.Rlimit
	cur := 1024
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &r) == nil && r.Cur > 0 && r.Cur < 1<<30 {
		cur = int(r.Cur)
	}
	b.limit = cur - ReserveFDs - cur/8
	if b.limit < 16 {
		b.limit = 16
	}
	b.perUID = map[int]int{}
}

// userLimit is the most uid may hold.
func (b *fdBudget) userLimit(uid int) int {
	if uid == 0 {
		return b.limit
	}
	return min(b.limit/2, MaxFDsPerUser)
}

// take reserves n descriptors for uid, or says which limit is reached.
func (b *fdBudget) take(uid, n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	if lim := b.userLimit(uid); b.perUID[uid]+n > lim {
		return fmt.Errorf("not counted: uid %d holds %d perf descriptors, the most one user may (%d metrics and the dispatch counter take %d per thread; use fewer metrics or ptt on -p PID)", uid, b.perUID[uid], n-1, n)
	}
	if b.total+n > b.limit {
		return fmt.Errorf("not counted: the agent holds %d perf descriptors for all users, the most it may while keeping a reserve for its control socket", b.total)
	}
	b.perUID[uid] += n
	b.total += n
	return nil
}

func (b *fdBudget) give(uid, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.perUID[uid] -= n
	b.total -= n
	if b.perUID[uid] <= 0 {
		delete(b.perUID, uid)
	}
}
