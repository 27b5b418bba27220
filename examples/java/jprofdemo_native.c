/* The native method of examples/java/JProfDemo.java. */
#include <jni.h>

JNIEXPORT jint JNICALL Java_JProfDemo_nativeAdd(JNIEnv *env, jclass cls, jint a, jint b)
{
	(void)env;
	(void)cls;
	return a + b;
}
