// Command msr reads and writes x86 model-specific registers on one or every
// CPU (PI's msr): through the pitrace module's MSR ioctls, or msr.ko's
// /dev/cpu/N/msr without the module. See docs/hwevents.md.
//
//	msr -r IA32_TSC -a          read on every CPU
//	msr -w IA32_TSC_AUX 5 -c 1  write on CPU 1
//	msr -l                      the register names
package main

import (
	"os"

	"perfinsp/tools/msr/msrcli"
)

func main() {
	os.Exit(msrcli.Run(os.Args, os.Stdout, os.Stderr))
}
