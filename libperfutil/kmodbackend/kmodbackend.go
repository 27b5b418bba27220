// Package kmodbackend is the trace facility backend on the pitrace kernel
// module: ioctl and mmap on /dev/pitrace.
package kmodbackend
