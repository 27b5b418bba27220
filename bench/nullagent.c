/*
 * The floor of JVMTI method-event profiling (bench/jprof-trace.sh): an agent
 * that enables MethodEntry / MethodExit with empty callbacks. What a run
 * with it costs over a plain run is the JVM's own event posting, which any
 * entry/exit agent pays; what calltree costs beyond it is the agent's.
 *   java -agentpath:nullagent.so ...
 */
#include <jvmti.h>
#include <string.h>

static void JNICALL on_entry(jvmtiEnv *e, JNIEnv *j, jthread t, jmethodID m)
{
	(void)e; (void)j; (void)t; (void)m;
}

static void JNICALL on_exit(jvmtiEnv *e, JNIEnv *j, jthread t, jmethodID m, jboolean ex, jvalue v)
{
	(void)e; (void)j; (void)t; (void)m; (void)ex; (void)v;
}

JNIEXPORT jint JNICALL Agent_OnLoad(JavaVM *vm, char *options, void *reserved)
{
	jvmtiEnv *jvmti;
	jvmtiCapabilities caps;
	jvmtiEventCallbacks cb;

	(void)options; (void)reserved;
	if ((*vm)->GetEnv(vm, (void **)&jvmti, JVMTI_VERSION_1_2) != JNI_OK)
		return JNI_ERR;
	memset(&caps, 0, sizeof(caps));
	caps.can_generate_method_entry_events = 1;
	caps.can_generate_method_exit_events = 1;
	if ((*jvmti)->AddCapabilities(jvmti, &caps) != JVMTI_ERROR_NONE)
		return JNI_ERR;
	memset(&cb, 0, sizeof(cb));
	cb.MethodEntry = on_entry;
	cb.MethodExit = on_exit;
	(*jvmti)->SetEventCallbacks(jvmti, &cb, sizeof(cb));
	(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_METHOD_ENTRY, NULL);
	(*jvmti)->SetEventNotificationMode(jvmti, JVMTI_ENABLE, JVMTI_EVENT_METHOD_EXIT, NULL);
	return JNI_OK;
}
