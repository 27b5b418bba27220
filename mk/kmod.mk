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
