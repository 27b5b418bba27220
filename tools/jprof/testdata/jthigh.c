/*
 * The agent's writer (jittrace.c, compiled in) across TIME_HIGH changes:
 * method events appended at chosen times (the chunk's TSC pair and rate
 * set so that a TSC value is a time), crossing three 2^32 ns boundaries,
 * then for every piece [from, len) between record boundaries the sender's
 * view: the TIME_HIGH in force at len as jt_high_at finds it (from the
 * owner's last one's offset, or by reading the piece) against reading
 * every record from the chunk's start, and the record count it takes
 * from the published word against the records counted. Prints "pieces N
 * fast F read R bad B" and exits 1 when B is not 0.
 */
#include "../agent/jittrace.c"

#define NEV 400

int main(void)
{
	uint32_t lens[NEV + 1], counts[NEV + 1];
	unsigned long pieces = 0, fast = 0, read = 0, bad = 0;
	struct jt_slot *s;
	struct jt_chunk *c;

	setenv("PERFINSP_BACKEND", "daemon", 1);	/* appends, never the module */
	s = jt_slot();
	if (!s)
		return 2;
	c = jt_chunk_get();
	s->cur = c;
	/* 1 ns a TSC cycle, from 5 * 2^32 ns less 100 us: a TSC value is
	 * the time's offset from there */
	jt_mult32 = 1ULL << 32;
	jt_anchor_cyc = ~0ULL >> 1;
	c->anchor_ns = (5ULL << 32) - 100000;
	c->anchor_tsc = 1;
	lens[0] = counts[0] = 0;
	for (int i = 0; i < NEV; i++) {
		/* a boundary every 100 events */
		uint64_t tsc = 1 + (uint64_t)(i / 100) * (1ULL << 32) + (uint64_t)(i % 100) * 1000 + 100000 * (i >= 100);

		jt_event(0x30, i & 1, 7, 1000 + i, tsc);
		lens[i + 1] = (uint32_t)c->pub;
		counts[i + 1] = (uint32_t)(c->pub >> 32);
	}
	for (int a = 0; a < NEV; a++) {
		uint32_t want_high = 0;
		unsigned long n = jt_scan(c->data, lens[a], &want_high);

		if (n != a) {
			printf("records before %u: %lu counted, %d appended\n", lens[a], n, a);
			bad++;
		}
		for (int b = a + 1; b <= NEV; b++) {
			uint32_t want = 0, got, off = __atomic_load_n(&c->high_off, __ATOMIC_RELAXED);

			jt_scan(c->data, lens[b], &want);
			c->sent_high = want_high;	/* what the sender had at from */
			got = jt_high_at(c, lens[a], lens[b]);
			pieces++;
			if (off < lens[b])
				fast++;
			else
				read++;
			if (got != want || counts[b] - counts[a] != (uint32_t)(b - a)) {
				if (bad < 5)
					printf("piece [%u, %u): high %u, want %u; %u records, want %d\n", lens[a], lens[b],
					       got, want, counts[b] - counts[a], b - a);
				bad++;
			}
		}
	}
	printf("pieces %lu fast %lu read %lu bad %lu\n", pieces, fast, read, bad);
	return bad != 0;
}
