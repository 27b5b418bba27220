//go:build !amd64

package ptt

// haveTSC: no user-space TSC/PMC read is implemented on this architecture;
// the backend then never chooses the rdtsc or rdpmc read paths.
const haveTSC = false

func rdtsc() uint64 { return 0 }

func rdpmc(uint32) uint64 { return 0 }
