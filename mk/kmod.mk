# The pitrace kernel module (kmod/). `make kmod` builds kmod/pitrace.ko
# against KDIR: the running kernel's build tree when it exists, else the
# newest Debian linux-headers-*-amd64 installed (the host kernel of the
# development machines has no module support; the VM test uses Debian 6.1).
KMOD_KDIR_DEFAULT := $(firstword $(wildcard /lib/modules/$(shell uname -r)/build) \
	$(lastword $(sort $(wildcard /usr/src/linux-headers-*-amd64))))
KDIR ?= $(KMOD_KDIR_DEFAULT)

.PHONY: kmod kmod-clean
kmod:
	@if [ -z "$(KDIR)" ]; then echo "kmod: no kernel headers: apt-get install linux-headers-amd64, or pass KDIR=/path/to/linux-headers" >&2; exit 1; fi
	$(MAKE) -C kmod KDIR=$(KDIR)

kmod-clean:
	$(MAKE) -C kmod clean

# The Go mirror of the module's ABI (libperfutil/kmodbackend/zabi.go, and
# zabi_header_test.go: the header's macros and struct layouts) is generated
# from kmod/uapi/pitrace.h by cgo -godefs (internal/abigen): run
# `make kmod-abi` after changing the header or abi_defs.go. kmod-abi-test
# regenerates into memory and fails when the files differ, then checks the
# header against libperfutil/trace's codes (needs gcc).
.PHONY: kmod-abi kmod-abi-test
kmod-abi:
	cd libperfutil/kmodbackend && go generate .

kmod-abi-test:
	go test -count=1 ./libperfutil/kmodbackend/ ./libperfutil/kmodbackend/internal/...
TEST_TARGETS += kmod-abi-test
