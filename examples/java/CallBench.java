// CallBench: a call-heavy Java program for bench/jprof.sh: fib(24) 20
// times (1,500,500 calls of fib), printing the elapsed time of that part.
public class CallBench {
    static int fib(int n) {
        return n < 2 ? n : fib(n - 1) + fib(n - 2);
    }

    public static void main(String[] args) {
        int reps = args.length > 0 ? Integer.parseInt(args[0]) : 20;
        long t0 = System.nanoTime();
        long s = 0;
        for (int i = 0; i < reps; i++) {
            s += fib(24);
        }
        long ns = System.nanoTime() - t0;
        System.out.println("elapsed_ms " + ns / 1000000 + " calls " + (long) reps * 75025 + " sum " + s);
    }
}
