# JProf (docs/jprof.md): the JVMTI agent bin/libjprof.so (tools/jprof/agent, C),
# the bundled Java examples (examples/java, compiled into build/java), the
# tests (the merge golden test, the agent end to end) and the benchmark.
# The JDK (openjdk-17-jdk-headless: javac, jcmd, jvmti.h) is in
# scripts/deps/jprof.txt; without it `make` leaves the agent out and
# jprof-test fails saying what to install.
JPROF_JAVA_HOME ?= $(shell j=$$(readlink -f $$(command -v javac 2>/dev/null) 2>/dev/null); [ -n "$$j" ] && dirname $$(dirname $$j))
JPROF_CFLAGS := -O2 -g -Wall -Wextra -Werror -fPIC -fvisibility=hidden \
	-I$(JPROF_JAVA_HOME)/include -I$(JPROF_JAVA_HOME)/include/linux -Ilibperfutil/c/include -Ilibperfutil/c -Ilibperfutil/c/hookit
JPROF_SRCS := tools/jprof/agent/jprof.c tools/jprof/agent/jittrace.c tools/jprof/agent/calltree.c tools/jprof/agent/jstacks.c tools/jprof/agent/jitdump.c tools/jprof/agent/jprofile.c tools/jprof/agent/waits.c libperfutil/c/agentconn.c

.PHONY: jprof jprof-test bench-jprof bench-java-sampling
ifneq ($(wildcard $(JPROF_JAVA_HOME)/include/jvmti.h),)
build: jprof
endif
jprof: $(BIN)/libjprof.so build/java/HotLoop.class build/java/JProfDemo.class build/java/Unloadable.class build/java/CallBench.class build/java/ShutdownDemo.class build/java/StackDemo.class build/java/WaitDemo.class build/java/libjprofdemo.so

# calltree mode runs on the call-flow runtime: libhookit.a (PIC) linked in,
# its symbols kept inside the agent.
$(BIN)/libjprof.so: $(JPROF_SRCS) tools/jprof/agent/jittrace.h tools/jprof/agent/jprof.h libperfutil/c/agentconn.h libperfutil/c/include/perfutil.h libperfutil/c/hookit/hookit_api.h $(BIN)/libhookit.a
	@test -f "$(JPROF_JAVA_HOME)/include/jvmti.h" || { echo "jprof: no JDK (jvmti.h): apt-get install openjdk-17-jdk-headless (scripts/deps/jprof.txt)" >&2; exit 1; }
	@mkdir -p $(BIN)
	$(CC) $(JPROF_CFLAGS) -shared -pthread -Wl,-soname,libjprof.so -Wl,--exclude-libs,ALL -o $@ $(JPROF_SRCS) $(BIN)/libhookit.a -ldl -lrt

build/java/libjprofdemo.so: examples/java/jprofdemo_native.c
	@mkdir -p build/java
	$(CC) $(JPROF_CFLAGS) -shared -o $@ $<

build/java/%.class: examples/java/%.java
	@mkdir -p build/java
	$(JPROF_JAVA_HOME)/bin/javac -d build/java $<

jprof-test: jprof
	$(GO) build -ldflags '$(LDVERSION)' -o $(BIN)/ ./tools/swtrace ./tools/post ./daemon/cmd/pitraced
	$(GO) test -count=1 -v ./analysis/merge/ ./tools/jprof/

bench-jprof: jprof
	bash bench/jprof.sh
bench: bench-jprof

# Sampling profilers on javac side by side: perfinsp (run.tprof -g with the
# agent's tprof mode) and the JDK's Flight Recorder (root: run.tprof).
bench-java-sampling: jprof
	bash bench/java-sampling.sh
bench: bench-java-sampling
