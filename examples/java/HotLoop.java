// HotLoop: one hot method that the JIT compiles (run.tprof of it with the
// agent in tprof mode names HotLoop.spin; docs/jprof.md). Argument: seconds.
public class HotLoop {
    static long sink;

    static long spin(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L + i;
            x ^= x >>> 29;
        }
        return x;
    }

    public static void main(String[] args) {
        double secs = args.length > 0 ? Double.parseDouble(args[0]) : 2;
        long end = System.nanoTime() + (long) (secs * 1e9);
        while (System.nanoTime() < end) {
            sink += spin(2_000_000);
        }
        System.out.println("HotLoop done " + (sink & 1));
    }
}
