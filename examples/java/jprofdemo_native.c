/* The native methods of examples/java/JProfDemo.java and ShutdownDemo.java. */
#include <jni.h>
#include <pthread.h>

JNIEXPORT jint JNICALL Java_JProfDemo_nativeAdd(JNIEnv *env, jclass cls, jint a, jint b)
{
	(void)env;
	(void)cls;
	return a + b;
}

static JavaVM *demo_vm;
static jclass demo_cls;

/* One OS thread, two Java threads: attach, call fromNative(i), detach. */
static void *attach_twice(void *arg)
{
	(void)arg;
	for (int i = 1; i <= 2; i++) {
		JNIEnv *env;
		jmethodID m;

		if ((*demo_vm)->AttachCurrentThread(demo_vm, (void **)&env, NULL) != JNI_OK)
			return NULL;
		m = (*env)->GetStaticMethodID(env, demo_cls, "fromNative", "(I)V");
		if (m)
			(*env)->CallStaticVoidMethod(env, demo_cls, m, (jint)i);
		(*demo_vm)->DetachCurrentThread(demo_vm);
	}
	return NULL;
}

JNIEXPORT void JNICALL Java_ShutdownDemo_attachTwice(JNIEnv *env, jclass cls)
{
	pthread_t th;

	if ((*env)->GetJavaVM(env, &demo_vm) != 0)
		return;
	demo_cls = (*env)->NewGlobalRef(env, cls);
	if (pthread_create(&th, NULL, attach_twice, NULL) == 0)
		pthread_join(th, NULL);
	(*env)->DeleteGlobalRef(env, demo_cls);
}
