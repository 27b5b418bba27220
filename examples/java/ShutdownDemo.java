// ShutdownDemo: Java code run by threads the JVM attaches to an OS thread
// whose Java thread ended.
//   - The JVM's shutdown: once main returns, the launcher detaches main and
//     attaches DestroyJavaVM to the same OS thread, which runs the shutdown
//     sequence (java.lang.Shutdown.shutdown) and starts and joins the hook.
//   - A native thread attaches, calls fromNative(1), detaches, attaches
//     again and calls fromNative(2) (libjprofdemo.so, JNI).
// Prints "ShutdownDemo done 3" at the end of main and "ShutdownDemo hook"
// from the hook.
public class ShutdownDemo {
    static native void attachTwice();

    static int calls;

    static void fromNative(int n) {
        calls += n;
    }

    static void inHook() {
        System.out.println("ShutdownDemo hook");
    }

    static class Hook extends Thread {
        @Override
        public void run() {
            inHook();
        }
    }

    public static void main(String[] args) {
        System.load(System.getProperty("jprofdemo.lib"));
        Runtime.getRuntime().addShutdownHook(new Hook());
        attachTwice();
        System.out.println("ShutdownDemo done " + calls);
    }
}
