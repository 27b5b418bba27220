public class Hot {
    static long spin(long n) {
        long x = 1;
        for (long i = 0; i < n; i++) x = x * 6364136223846793005L + i;
        return x;
    }
    public static void main(String[] a) throws Exception {
        // a[0] ms of this thread's CPU time (not of the clock: a busy
        // machine gives it less CPU in the same time)
        java.lang.management.ThreadMXBean tb = java.lang.management.ManagementFactory.getThreadMXBean();
        long end = tb.getCurrentThreadCpuTime() + Long.parseLong(a[0]) * 1_000_000L;
        long s = 0;
        while (tb.getCurrentThreadCpuTime() < end) s += spin(100000);
        System.out.println("ready " + s);
        System.out.flush();
        Thread.sleep(Long.parseLong(a[1]));
    }
}
