// Unloadable: loaded by its own class loader in JProfDemo's "unload" mode,
// called, then dropped and collected (class unloading under the agent).
public class Unloadable {
    public static long call(long x) {
        for (int i = 0; i < 1000; i++) {
            x = x * 17 + i;
        }
        return x;
    }
}
