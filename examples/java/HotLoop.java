// HotLoop: one hot method that the JIT compiles (run.tprof of it with the
// agent in tprof mode names HotLoop.spin; docs/jprof.md).
//   java HotLoop [SECONDS [wait]]
// prints "pid N" first and "HotLoop done" after the loop; with "wait" it
// then blocks until its standard input ends (so that a test can look at
// the running JVM, e.g. jcmd PID Compiler.perfmap, before it exits).
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

    public static void main(String[] args) throws Exception {
        System.out.println("pid " + ProcessHandle.current().pid());
        System.out.flush();
        double secs = args.length > 0 ? Double.parseDouble(args[0]) : 2;
        long end = System.nanoTime() + (long) (secs * 1e9);
        while (System.nanoTime() < end) {
            sink += spin(2_000_000);
        }
        System.out.println("HotLoop done " + (sink & 1));
        System.out.flush();
        if (args.length > 1 && args[1].equals("wait")) {
            while (System.in.read() >= 0) {
            }
        }
    }
}
