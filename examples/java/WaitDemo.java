import java.util.concurrent.CountDownLatch;

/**
 * Where threads wait, for the agent's lock and wall options (docs/jprof.md).
 *
 *   java WaitDemo lock [N] [MS]  a holder thread keeps one monitor MS (200) ms,
 *                                N (5) times; main contends for it each time in
 *                                waitForLock, and prints the time it waited
 *   java WaitDemo wall [MS]      a thread sleeping in sleepIn and one spinning
 *                                in spin, both for MS (2000) ms; prints the
 *                                time each ran
 */
public class WaitDemo {
    static final Object LOCK = new Object();
    static volatile long sink;

    static void waitForLock() {
        synchronized (LOCK) {
            sink++;
        }
    }

    static void lockTest(int n, long ms) throws InterruptedException {
        long waited = 0;
        for (int i = 0; i < n; i++) {
            CountDownLatch held = new CountDownLatch(1);
            Thread holder = new Thread(() -> {
                synchronized (LOCK) {
                    held.countDown();
                    try {
                        Thread.sleep(ms);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
            }, "holder");
            holder.start();
            held.await();
            long t0 = System.nanoTime();
            waitForLock();
            waited += System.nanoTime() - t0;
            holder.join();
        }
        System.out.println("WaitDemo lock: waited " + waited + " ns in " + n + " contentions");
    }

    static void sleepIn(long ms) throws InterruptedException {
        Thread.sleep(ms);
    }

    static long spin(long ms) {
        long end = System.nanoTime() + ms * 1000000L, x = 1;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 1000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
        }
        return x;
    }

    static void wallTest(long ms) throws InterruptedException {
        long[] ran = new long[2];
        Thread sleeper = new Thread(() -> {
            long t0 = System.nanoTime();
            try {
                sleepIn(ms);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            ran[0] = System.nanoTime() - t0;
        }, "sleeper");
        Thread spinner = new Thread(() -> {
            long t0 = System.nanoTime();
            sink = spin(ms);
            ran[1] = System.nanoTime() - t0;
        }, "spinner");
        sleeper.start();
        spinner.start();
        sleeper.join();
        spinner.join();
        System.out.println("WaitDemo wall: sleeper " + ran[0] + " ns, spinner " + ran[1] + " ns");
    }

    public static void main(String[] args) throws InterruptedException {
        String mode = args.length > 0 ? args[0] : "lock";
        if (mode.equals("lock")) {
            lockTest(args.length > 1 ? Integer.parseInt(args[1]) : 5, args.length > 2 ? Long.parseLong(args[2]) : 200);
        } else if (mode.equals("wall")) {
            wallTest(args.length > 1 ? Long.parseLong(args[1]) : 2000);
        } else {
            System.err.println("usage: java WaitDemo lock [N] [MS] | wall [MS]");
            System.exit(2);
        }
    }
}
