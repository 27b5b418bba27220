package ptt

// haveTSC: this architecture can read the time stamp counter from user space.
const haveTSC = true

// rdtsc reads the time stamp counter.
func rdtsc() uint64

// rdpmc reads performance counter idx (only when the kernel allows it:
// cap_user_rdpmc and a non-zero index in the event's mmap page).
func rdpmc(idx uint32) uint64
