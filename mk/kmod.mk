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
	@for_rel=$$(sed -n 's/^#define UTS_RELEASE "\(.*\)"/\1/p' $(KDIR)/include/generated/utsrelease.h 2>/dev/null); \
	  run_rel=$$(uname -r); \
	  if [ -n "$$for_rel" ] && [ "$$for_rel" != "$$run_rel" ]; then \
	    echo "kmod: building pitrace.ko for kernel $$for_rel (headers $(KDIR)), not for the running kernel $$run_rel:"; \
	    echo "kmod: it loads only into $$for_rel (the VM test's kernel). For this machine install its headers"; \
	    echo "kmod: (apt-get install linux-headers-$$run_rel, or its build tree as /lib/modules/$$run_rel/build), or pass KDIR=/path/to/its/headers."; \
	  fi
	$(MAKE) -C kmod KDIR=$(KDIR)

kmod-clean:
	$(MAKE) -C kmod clean

# The Go mirror of the module's ABI (libperfutil/kmodbackend/zabi.go, and
# zabi_header_test.go: the header's macros and struct layouts) is generated
# from kmod/uapi/pitrace.h by cgo -godefs (internal/abigen): run
# `make kmod-abi` after changing the header or abi_defs.go. kmod-abi-test
# regenerates into memory and fails when the files differ, then checks the
# header against format/trace's codes (needs gcc).
.PHONY: kmod-abi kmod-abi-test
kmod-abi:
	cd libperfutil/kmodbackend && go generate .

kmod-abi-test:
	go test -count=1 ./libperfutil/kmodbackend/ ./libperfutil/kmodbackend/internal/...
TEST_TARGETS += kmod-abi-test
