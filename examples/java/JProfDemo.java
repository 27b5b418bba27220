// JProfDemo: the bundled example of JProf's calltree mode (docs/jprof.md),
// with call counts the test checks exactly in log-rt:
//   fib(12) recursion: 465 calls of fib; empty(): 1000 calls (the
//   calibration check: its BASE is about 0); catcher() x3, each calling
//   thrower(1) -> thrower(0), which throws through both thrower frames;
//   nativeAdd(): a native method (libjprofdemo.so), 7 calls; hot(): 30000
//   calls, interpreted first, then compiled by the JIT; a second thread
//   "worker" calling work() 5 times.
//   java -Djprofdemo.lib=PATH/libjprofdemo.so -cp build/java JProfDemo
// Other modes, for the agent's robustness tests:
//   JProfDemo exit    System.exit(3) while a daemon thread calls hot()
//   JProfDemo unload  loads Unloadable with its own class loader, calls it,
//                     drops it and collects until the class is unloaded
//   JProfDemo wait    prints "pid N", calls hot() until stdin ends
public class JProfDemo {
    static volatile long calls;
    static native int nativeAdd(int a, int b);

    static int fib(int n) {
        return n < 2 ? n : fib(n - 1) + fib(n - 2);
    }

    static void empty() {
    }

    static void thrower(int depth) {
        if (depth == 0) {
            throw new IllegalStateException("thrown through two frames");
        }
        thrower(depth - 1);
    }

    static int catcher() {
        try {
            thrower(1);
        } catch (IllegalStateException e) {
            return 1;
        }
        return 0;
    }

    static long hot(long x) {
        for (int i = 0; i < 200; i++) {
            x = x * 31 + i;
        }
        return x;
    }

    static long work(int n) {
        long s = 0;
        for (int i = 0; i < n; i++) {
            s += i * (long) i;
        }
        return s;
    }

    public static void main(String[] args) throws Exception {
        String mode = args.length > 0 ? args[0] : "";
        if (mode.equals("exit")) {
            Thread d = new Thread(() -> {
                while (true) {
                    hot(calls++);
                }
            }, "spinner");
            d.setDaemon(true);
            d.start();
            while (calls < 1000) {
                Thread.onSpinWait();
            }
            System.exit(3);
        }
        if (mode.equals("unload")) {
            java.net.URL dir = JProfDemo.class.getProtectionDomain().getCodeSource().getLocation();
            java.net.URLClassLoader l = new java.net.URLClassLoader(new java.net.URL[] {dir}, null);
            Class<?> c = l.loadClass("Unloadable");
            long r = 0;
            for (int i = 0; i < 100; i++) {
                r += (Long) c.getMethod("call", long.class).invoke(null, (long) i);
            }
            java.lang.ref.WeakReference<Class<?>> ref = new java.lang.ref.WeakReference<>(c);
            c = null;
            l.close();
            l = null;
            while (ref.get() != null) {
                System.gc();
            }
            System.out.println("unloaded " + (r & 1));
            return;
        }
        if (mode.equals("wait")) {
            System.out.println("pid " + ProcessHandle.current().pid());
            System.out.flush();
            Thread r = new Thread(() -> {
                try {
                    while (System.in.read() >= 0) {
                    }
                } catch (java.io.IOException e) {
                }
                System.exit(0);
            }, "stdin");
            r.start();
            while (true) {
                hot(calls++);
            }
        }
        System.load(System.getProperty("jprofdemo.lib"));
        long sink = fib(12);
        for (int i = 0; i < 1000; i++) {
            empty();
        }
        for (int i = 0; i < 3; i++) {
            sink += catcher();
        }
        for (int i = 0; i < 7; i++) {
            sink += nativeAdd(i, 1);
        }
        for (int i = 0; i < 30000; i++) {
            sink += hot(i);
        }
        Thread t = new Thread(() -> {
            long s = 0;
            for (int i = 0; i < 5; i++) {
                s += work(1000);
            }
            System.out.println("worker " + (s & 1));
        }, "worker");
        t.start();
        t.join();
        System.out.println("JProfDemo done " + (sink & 1));
    }
}
