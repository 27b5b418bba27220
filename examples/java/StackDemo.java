// StackDemo: known Java stacks under a tick, for JProf's named stacks
// (docs/jprof.md). main -> outer -> middle -> compute (a busy loop) and
// main -> outer -> middle -> writer -> FileOutputStream.write (a system
// call, write(2), to /dev/null), alternately, until SECONDS of wall-clock
// time have passed. Run it with -Xint: every Java frame is interpreted.
//   java StackDemo [SECONDS]
// prints "pid N" first and "StackDemo done" at the end.
import java.io.FileOutputStream;
import java.io.IOException;

public class StackDemo {
    static long sink;

    static long compute(int n) {
        long x = 0;
        for (int i = 0; i < n; i++) {
            x = x * 31 + i;
        }
        return x;
    }

    static void writer(FileOutputStream out, byte[] b, int n) throws IOException {
        for (int i = 0; i < n; i++) {
            out.write(b);
        }
    }

    static void middle(FileOutputStream out, byte[] b) throws IOException {
        sink += compute(5_000);
        writer(out, b, 100);
    }

    static void outer(FileOutputStream out, byte[] b) throws IOException {
        middle(out, b);
    }

    public static void main(String[] args) throws Exception {
        System.out.println("pid " + ProcessHandle.current().pid());
        System.out.flush();
        double secs = args.length > 0 ? Double.parseDouble(args[0]) : 2;
        long end = System.nanoTime() + (long) (secs * 1e9);
        byte[] b = new byte[4096];
        try (FileOutputStream out = new FileOutputStream("/dev/null")) {
            while (System.nanoTime() < end) {
                outer(out, b);
            }
        }
        System.out.println("StackDemo done " + (sink & 1));
    }
}
