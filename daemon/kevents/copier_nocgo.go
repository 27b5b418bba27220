//go:build !cgo

package kevents

// Without cgo there is no copier (copier_cgo.go): the real-time reader
// reads the kernel's rings itself, and a busy machine that keeps it from
// running after a preemption can make the rings overflow.

type copier struct{}

func newCopier([]*ring, int) (*copier, error) { return nil, nil }
func (*copier) start(int)                     {}
func (*copier) wakeFd() int                   { return -1 }
func (*copier) ack()                          {}
func (*copier) stop() error                   { return nil }
func (*copier) direct() bool                  { return true }
func (*copier) close()                        {}
