/*
 * The agent's own profile (docs/jprof.md, "Lock contention and wall
 * clock"): Java stacks aggregated in the agent, written when the JVM ends
 * as one pprof file DIR/jprof-PID.pb.gz (sample types lock-contentions/count
 * and lock-wait/nanoseconds for the lock option, wall-samples/count and
 * wall/nanoseconds for wall) and a folded file per kind
 * (DIR/jprof-PID-lock.folded, DIR/jprof-PID-wall.folded: root first, the
 * value in nanoseconds).
 *
 * A table holds each distinct stack (its jmethodIDs, leaf first, and a tag:
 * the thread state for wall) once, with a count and a total; memory is
 * bounded (PROF_SLOTS stacks, PROF_FRAMES frames per table): what comes past
 * the bound is charged to one "[stacks past the agent's table]" entry. The
 * jmethodIDs are named only when the profile is written (a method of a
 * class unloaded since is "method@ADDR").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jvmti.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jprof.h"

#define PROF_SLOTS (1u << 14)		/* distinct stacks per table */
#define PROF_FRAMES (1u << 19)		/* frames per table (4 MB) */

struct entry {
	uint64_t hash, count, ns;
	uint32_t off, n, tag, used;
};

static struct table {
	pthread_mutex_t lock;
	struct entry *slots;
	jmethodID *frames;
	size_t nframes;
	unsigned nstacks;
	int on;				/* the kind is in the profile */
	uint64_t over_count, over_ns;	/* past the bound */
} tables[PROF_KINDS] = {
	{ .lock = PTHREAD_MUTEX_INITIALIZER }, { .lock = PTHREAD_MUTEX_INITIALIZER },
};

static const char *const state_names[] = {
	[PROF_RUNNABLE] = "RUNNABLE", [PROF_BLOCKED] = "BLOCKED",
	[PROF_WAITING] = "WAITING", [PROF_TIMED_WAITING] = "TIMED_WAITING",
};

int prof_init(int kind)
{
	struct table *t = &tables[kind];

	pthread_mutex_lock(&t->lock);
	if (t->slots) {		/* an attach after a stop: a new profile */
		memset(t->slots, 0, PROF_SLOTS * sizeof(*t->slots));
		t->nframes = 0;
		t->nstacks = 0;
		t->over_count = t->over_ns = 0;
	} else {
		t->slots = calloc(PROF_SLOTS, sizeof(*t->slots));
		t->frames = calloc(PROF_FRAMES, sizeof(*t->frames));
		if (!t->slots || !t->frames) {
			free(t->slots);
			free(t->frames);
			t->slots = NULL;
			t->frames = NULL;
			pthread_mutex_unlock(&t->lock);
			return -1;
		}
	}
	t->on = 1;
	pthread_mutex_unlock(&t->lock);
	return 0;
}

void prof_reset(void)
{
	for (int k = 0; k < PROF_KINDS; k++) {
		pthread_mutex_lock(&tables[k].lock);
		tables[k].on = 0;
		pthread_mutex_unlock(&tables[k].lock);
	}
}

static uint64_t stack_hash(unsigned tag, const jvmtiFrameInfo *f, int n)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ tag;

	for (int i = 0; i < n; i++) {
		h ^= (uint64_t)(uintptr_t)f[i].method;
		h *= 0x100000001b3ULL;
	}
	return h ^ (uint64_t)n;
}

static int same(const struct table *t, const struct entry *e, unsigned tag, const jvmtiFrameInfo *f, int n)
{
	if (e->tag != tag || e->n != (uint32_t)n)
		return 0;
	for (int i = 0; i < n; i++)
		if (t->frames[e->off + i] != f[i].method)
			return 0;
	return 1;
}

void prof_add(int kind, unsigned tag, const jvmtiFrameInfo *f, int n, uint64_t count, uint64_t ns)
{
	struct table *t = &tables[kind];
	uint64_t h;
	unsigned i, k;

	if (!t->slots)
		return;
	h = stack_hash(tag, f, n);
	pthread_mutex_lock(&t->lock);
	if (!t->on)
		goto out;
	for (i = (unsigned)(h >> 20) & (PROF_SLOTS - 1), k = 0; k < PROF_SLOTS; i = (i + 1) & (PROF_SLOTS - 1), k++) {
		struct entry *e = &t->slots[i];

		if (e->used && e->hash == h && same(t, e, tag, f, n)) {
			e->count += count;
			e->ns += ns;
			goto out;
		}
		if (!e->used) {
			if (t->nstacks + 1 > PROF_SLOTS * 3 / 4 || t->nframes + (size_t)n > PROF_FRAMES)
				break;
			e->used = 1;
			e->hash = h;
			e->tag = tag;
			e->n = (uint32_t)n;
			e->off = (uint32_t)t->nframes;
			for (int j = 0; j < n; j++)
				t->frames[t->nframes++] = f[j].method;
			e->count = count;
			e->ns = ns;
			t->nstacks++;
			goto out;
		}
	}
	t->over_count += count;
	t->over_ns += ns;
out:
	pthread_mutex_unlock(&t->lock);
}

/* A growing byte buffer; err set once memory ran out. */
struct buf {
	uint8_t *b;
	size_t n, cap;
	int err;
};

static void put(struct buf *b, const void *p, size_t n)
{
	if (b->err)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		uint8_t *nb;

		while (cap < b->n + n)
			cap *= 2;
		if (!(nb = realloc(b->b, cap))) {
			b->err = 1;
			return;
		}
		b->b = nb;
		b->cap = cap;
	}
	memcpy(b->b + b->n, p, n);
	b->n += n;
}

/* protobuf: varints, keys, length-delimited fields */
static void pb_varint(struct buf *b, uint64_t v)
{
	uint8_t tmp[10];
	size_t n = 0;

	do {
		tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	put(b, tmp, n);
}

static void pb_uint(struct buf *b, unsigned field, uint64_t v)
{
	pb_varint(b, (uint64_t)field << 3);
	pb_varint(b, v);
}

static void pb_bytes(struct buf *b, unsigned field, const void *p, size_t n)
{
	pb_varint(b, (uint64_t)field << 3 | 2);
	pb_varint(b, n);
	put(b, p, n);
}

static void pb_msg(struct buf *b, unsigned field, struct buf *m)
{
	if (m->err)
		b->err = 1;
	pb_bytes(b, field, m->b, m->n);
	m->n = 0;
}

/* The profile being written: its string table and functions by method. */
struct writer {
	jvmtiEnv *jvmti;
	struct buf prof, msg, sub;
	int64_t nstrings;
	struct fn {
		jmethodID m;
		uint64_t id;
		char *name;
	} *fns;
	size_t nfns, fcap;		/* fcap a power of two */
	uint64_t next_id;
};

static int64_t str(struct writer *w, const char *s)
{
	pb_bytes(&w->prof, 6, s, strlen(s));
	return w->nstrings++;
}

/* The function (and location: the same id) of a method, made once. */
static struct fn *fn_of(struct writer *w, jmethodID m)
{
	size_t i = (size_t)(((uint64_t)(uintptr_t)m >> 3) * 0x9E3779B97F4A7C15ULL >> 40) & (w->fcap - 1);
	struct fn *f;

	for (; w->fns[i].id; i = (i + 1) & (w->fcap - 1))
		if (w->fns[i].m == m)
			return &w->fns[i];
	f = &w->fns[i];
	f->m = m;
	f->id = ++w->next_id;
	f->name = m == PROF_CUT ? strdup("[deeper frames cut]") :
		  m == PROF_OVER ? strdup("[stacks past the agent's table]") : jprof_method_name(m);
	if (!f->name && asprintf(&f->name, "method@%p", (void *)m) < 0)
		f->name = NULL;
	w->nfns++;
	/* Function {1 id, 2 name, 3 system_name}; Location {1 id, 4 Line {1 function_id}} */
	{
		int64_t s = str(w, f->name ? f->name : "?");

		pb_uint(&w->msg, 1, f->id);
		pb_uint(&w->msg, 2, (uint64_t)s);
		pb_uint(&w->msg, 3, (uint64_t)s);
		pb_msg(&w->prof, 5, &w->msg);
		pb_uint(&w->sub, 1, f->id);
		pb_msg(&w->msg, 4, &w->sub);
		pb_uint(&w->msg, 1, f->id);
		pb_msg(&w->prof, 4, &w->msg);
	}
	return f;
}

static const char *kind_name[PROF_KINDS] = { "lock", "wall" };

/* A file of an earlier process of this pid is ours to replace; another
 * user's (in a sticky /tmp) is not, and O_EXCL refuses it and links. */
static FILE *create(const char *path)
{
	int fd;
	FILE *f;

	if (unlink(path) != 0 && errno != ENOENT) {
		fprintf(stderr, "jprof: %s exists and is not ours to replace (%s): give dir=DIR\n", path, strerror(errno));
		return NULL;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		fprintf(stderr, "jprof: cannot create %s (%s): give dir=DIR\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	return f;
}

/* One sample: its locations (leaf first) and values in the type order. */
static void sample(struct writer *w, FILE *folded, const jmethodID *frames, int n, const char *state,
		   const int64_t *vals, int nvals, uint64_t ns, int64_t state_key, int64_t state_val)
{
	struct fn **fs = calloc((size_t)n + 1, sizeof(*fs));
	int k = 0;

	if (!fs) {
		w->prof.err = 1;
		return;
	}
	for (int i = 0; i < n; i++)
		fs[k++] = fn_of(w, frames[i]);
	for (int i = 0; i < k; i++)
		pb_varint(&w->sub, fs[i]->id);
	pb_msg(&w->msg, 1, &w->sub);
	for (int i = 0; i < nvals; i++)
		pb_varint(&w->sub, (uint64_t)vals[i]);
	pb_msg(&w->msg, 2, &w->sub);
	if (state) {	/* Label {1 key, 2 str} */
		pb_uint(&w->sub, 1, (uint64_t)state_key);
		pb_uint(&w->sub, 2, (uint64_t)state_val);
		pb_msg(&w->msg, 3, &w->sub);
	}
	pb_msg(&w->prof, 2, &w->msg);
	if (folded) {
		if (!k)
			fprintf(folded, "[no Java frames]");
		for (int i = k - 1; i >= 0; i--)
			fprintf(folded, "%s%s", fs[i]->name ? fs[i]->name : "?", i ? ";" : "");
		if (state)
			fprintf(folded, ";[%s]", state);
		fprintf(folded, " %llu\n", (unsigned long long)ns);
	}
	free(fs);
}

/* A gzip member of stored (uncompressed) deflate blocks: any gzip reader
 * (pprof, zcat) reads it; no compression library needed. */
static uint32_t crc32_of(const uint8_t *p, size_t n)
{
	static uint32_t tab[256];
	uint32_t c = 0xffffffffu;

	if (!tab[1])
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t v = i;

			for (int j = 0; j < 8; j++)
				v = v & 1 ? 0xedb88320u ^ (v >> 1) : v >> 1;
			tab[i] = v;
		}
	while (n--)
		c = tab[(c ^ *p++) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffffu;
}

static int write_gzip(FILE *f, const uint8_t *p, size_t n)
{
	static const uint8_t hdr[10] = { 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff };
	uint32_t crc = crc32_of(p, n), isize = (uint32_t)n;
	uint8_t tail[8];
	size_t o = 0;

	fwrite(hdr, 1, sizeof(hdr), f);
	do {
		size_t len = n - o > 65535 ? 65535 : n - o;
		uint8_t bh[5] = { o + len == n, (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)~len, (uint8_t)(~len >> 8) };

		fwrite(bh, 1, sizeof(bh), f);
		fwrite(p + o, 1, len, f);
		o += len;
	} while (o < n);
	for (int i = 0; i < 4; i++) {
		tail[i] = (uint8_t)(crc >> (8 * i));
		tail[4 + i] = (uint8_t)(isize >> (8 * i));
	}
	fwrite(tail, 1, sizeof(tail), f);
	return ferror(f) ? -1 : 0;
}

static uint64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int prof_write(jvmtiEnv *jvmti, const char *dir, uint64_t duration_ns, int verbose)
{
	struct writer w = { .jvmti = jvmti };
	char path[4200];
	FILE *f, *folded[PROF_KINDS] = { NULL, NULL };
	int64_t ty[4], un[4], nvals = 0, state_key = 0, states[PROF_STATES] = { 0 }, base[PROF_KINDS] = { 0 };
	size_t frames = 0;
	int kinds = 0, rc = 0, locked[PROF_KINDS] = { 0 };

	for (int k = 0; k < PROF_KINDS; k++) {
		pthread_mutex_lock(&tables[k].lock);
		if (!tables[k].on) {
			pthread_mutex_unlock(&tables[k].lock);
			continue;
		}
		locked[k] = 1;
		kinds++;
		frames += tables[k].nframes;
	}
	if (!kinds)
		return 0;
	for (w.fcap = 64; w.fcap < 2 * (frames + 4); w.fcap *= 2)
		;
	w.fns = calloc(w.fcap, sizeof(*w.fns));
	if (!w.fns) {
		rc = -1;
		goto unlock;
	}
	str(&w, "");
	if (tables[PROF_LOCK].on) {
		base[PROF_LOCK] = nvals;
		ty[nvals] = str(&w, "lock-contentions"), un[nvals++] = str(&w, "count");
		ty[nvals] = str(&w, "lock-wait"), un[nvals++] = str(&w, "nanoseconds");
	}
	if (tables[PROF_WALL].on) {
		base[PROF_WALL] = nvals;
		ty[nvals] = str(&w, "wall-samples"), un[nvals++] = str(&w, "count");
		ty[nvals] = str(&w, "wall"), un[nvals++] = str(&w, "nanoseconds");
		state_key = str(&w, "thread_state");
		for (int s = 0; s < PROF_STATES; s++)
			states[s] = str(&w, state_names[s]);
	}
	for (int i = 0; i < nvals; i++) {	/* ValueType {1 type, 2 unit} */
		pb_uint(&w.msg, 1, (uint64_t)ty[i]);
		pb_uint(&w.msg, 2, (uint64_t)un[i]);
		pb_msg(&w.prof, 1, &w.msg);
	}
	for (int k = 0; k < PROF_KINDS; k++) {
		struct table *t = &tables[k];
		int64_t vals[4];

		if (!t->on)
			continue;
		snprintf(path, sizeof(path), "%s/jprof-%d-%s.folded", dir, (int)getpid(), kind_name[k]);
		folded[k] = create(path);
		for (unsigned i = 0; i < PROF_SLOTS; i++) {
			struct entry *e = &t->slots[i];

			if (!e->used)
				continue;
			memset(vals, 0, sizeof(vals));
			vals[base[k]] = (int64_t)e->count;
			vals[base[k] + 1] = (int64_t)e->ns;
			sample(&w, folded[k], t->frames + e->off, (int)e->n,
			       k == PROF_WALL ? state_names[e->tag] : NULL, vals, (int)nvals, e->ns,
			       state_key, k == PROF_WALL ? states[e->tag] : 0);
		}
		if (t->over_count) {
			jmethodID over = PROF_OVER;

			memset(vals, 0, sizeof(vals));
			vals[base[k]] = (int64_t)t->over_count;
			vals[base[k] + 1] = (int64_t)t->over_ns;
			sample(&w, folded[k], &over, 1, NULL, vals, (int)nvals, t->over_ns, 0, 0);
		}
	}
	pb_uint(&w.prof, 9, real_ns() - duration_ns);	/* time_nanos */
	pb_uint(&w.prof, 10, duration_ns);
	if (w.prof.err) {
		fprintf(stderr, "jprof: no memory for the lock/wall profile\n");
		rc = -1;
		goto out;
	}
	snprintf(path, sizeof(path), "%s/jprof-%d.pb.gz", dir, (int)getpid());
	if (!(f = create(path))) {
		rc = -1;
		goto out;
	}
	if (write_gzip(f, w.prof.b, w.prof.n) != 0 || fclose(f) != 0) {
		fprintf(stderr, "jprof: cannot write %s: %s\n", path, strerror(errno));
		rc = -1;
	}
	fprintf(stderr, "jprof: %s profile in %s", tables[PROF_LOCK].on && tables[PROF_WALL].on ? "lock and wall" :
		tables[PROF_LOCK].on ? "lock" : "wall", path);
	for (int k = 0; k < PROF_KINDS; k++)
		if (folded[k])
			fprintf(stderr, ", %s/jprof-%d-%s.folded", dir, (int)getpid(), kind_name[k]);
	fprintf(stderr, "\n");
	if (verbose)
		for (int k = 0; k < PROF_KINDS; k++)
			if (tables[k].on)
				fprintf(stderr, "jprof: %s: %u stacks, %llu samples past the table's bound\n", kind_name[k],
					tables[k].nstacks, (unsigned long long)tables[k].over_count);
out:
	for (int k = 0; k < PROF_KINDS; k++)
		if (folded[k] && fclose(folded[k]) != 0)
			fprintf(stderr, "jprof: cannot write the %s folded file: %s\n", kind_name[k], strerror(errno));
	for (size_t i = 0; i < w.fcap; i++)
		free(w.fns[i].name);
	free(w.fns);
	free(w.prof.b);
	free(w.msg.b);
	free(w.sub.b);
unlock:
	for (int k = PROF_KINDS - 1; k >= 0; k--)
		if (locked[k])
			pthread_mutex_unlock(&tables[k].lock);
	return rc;
}
