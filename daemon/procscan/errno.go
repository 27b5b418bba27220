package procscan

import "syscall"

// unixESRCH is what reading /proc/PID/maps returns once the process is gone.
const unixESRCH = syscall.ESRCH
