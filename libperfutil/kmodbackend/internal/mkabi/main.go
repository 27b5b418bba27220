// Command mkabi writes kmodbackend's generated ABI files (internal/abigen)
// from kmod/uapi/pitrace.h: run by `go generate` in libperfutil/kmodbackend
// and by `make kmod-abi`.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"perfinsp/libperfutil/kmodbackend/internal/abigen"
)

func main() {
	pkg := flag.String("pkg", ".", "the kmodbackend package directory (abi_defs.go; the outputs)")
	uapi := flag.String("uapi", "../../kmod/uapi", "the directory of pitrace.h")
	flag.Parse()
	files, err := abigen.New(*pkg, *uapi).Generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkabi:", err)
		os.Exit(1)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(*pkg, n)
		if err := os.WriteFile(p, files[n], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "mkabi:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "mkabi: wrote", p)
	}
}
