__attribute__((noinline)) int lib_work(int x) { return x * x + 7; }
