# post and A2N: benchmarks (agreement with perf, speed against perf report).
.PHONY: bench-post
bench-post: build
	bash bench/post/run.sh
bench: bench-post
