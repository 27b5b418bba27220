// SPDX-License-Identifier: GPL-2.0
/*
 * pitrace_buf.c - pinned per-CPU segmented buffers and the record writer.
 *
 * Each CPU has a trace buffer and an MTE buffer.  A buffer is a header page
 * (struct pitrace_buf_hdr, mapped read-only to user space) followed by
 * nseg segments.  Each segment starts with a TIME_HIGH record and holds
 * whole records.  The modes behave exactly like format/tracebuf:
 *
 *  normal: when no segment is free the record is lost, the buffer is marked
 *          full and tracing stops;
 *  wrap:   the trace buffer reuses its oldest complete segment (its records
 *          count as lost); the MTE buffer is never overwritten, it is
 *          drained like cont;
 *  cont:   complete segments wait for the drainer (PITRACE_IOC_RELEASE
 *          gives them back); when none is free records are counted lost and
 *          a LOST record is written once space returns.
 *
 * A buffer has one writer: its CPU, with interrupts disabled.  An NMI that
 * arrives inside a write (event-based tprof on a hardware PMU) finds the
 * busy flag set and counts its record as lost instead of nesting.
 */
#include <linux/gfp.h>
#include <linux/irqflags.h>
#include <linux/mm.h>
#include <linux/rcupdate.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/timekeeping.h>
#include <linux/vmalloc.h>

#include "pitrace_int.h"

u32 pt_seg_size(u64 size)
{
	u64 s = size / PITRACE_SEGMENTS;

	if (s < PITRACE_MIN_SEGMENT)
		s = PITRACE_MIN_SEGMENT;
	if (s > size)
		s = size;
	return (u32)(s & ~3ULL);
}

u64 pt_mem_limit(void)
{
	return ((u64)totalram_pages() << PAGE_SHIFT) / 2;
}

static void pt_buf_free(struct pt_buf *b)
{
	unsigned int i;

	if (b->vaddr)
		vunmap(b->vaddr);
	if (b->pages) {
		for (i = 0; i < b->npages; i++)
			if (b->pages[i])
				__free_page(b->pages[i]);
		kvfree(b->pages);
	}
	memset(b, 0, sizeof(*b));
}

static int pt_buf_alloc(struct pt_buf *b, u64 size, u32 cpu, u32 kind)
{
	unsigned int i;
	u64 bytes;
	int node = cpu_to_node(cpu);

	b->cpu = cpu;
	b->kind = kind;
	b->seg_size = pt_seg_size(size);
	b->nseg = (u32)(size / b->seg_size);
	if (b->nseg == 0 || b->nseg > PITRACE_SEGMENTS)
		return -EINVAL;
	bytes = PAGE_SIZE + (u64)b->nseg * b->seg_size;
	b->npages = (unsigned int)(PAGE_ALIGN(bytes) >> PAGE_SHIFT);
	b->pages = kvcalloc(b->npages, sizeof(*b->pages),
			    GFP_KERNEL | __GFP_NOWARN);
	if (!b->pages)
		return -ENOMEM;
	for (i = 0; i < b->npages; i++) {
		b->pages[i] = alloc_pages_node(node, GFP_KERNEL | __GFP_ZERO |
					       __GFP_NOWARN |
					       __GFP_RETRY_MAYFAIL, 0);
		if (!b->pages[i])
			return -ENOMEM;
		if ((i & 255) == 255)
			cond_resched();
	}
	b->vaddr = vmap(b->pages, b->npages, VM_MAP, PAGE_KERNEL);
	if (!b->vaddr)
		return -ENOMEM;
	b->hdr = b->vaddr;
	b->data = (u8 *)b->vaddr + PAGE_SIZE;
	return 0;
}

/* Returns the set or an ERR_PTR; nothing stays allocated on failure. */
struct pt_set *pt_set_alloc(u64 trace_size, u64 mte_size, u32 mode, u32 ncpu)
{
	struct pt_set *s;
	u32 cpu;
	int err = -ENOMEM;

	s = kzalloc(sizeof(*s), GFP_KERNEL);
	if (!s)
		return ERR_PTR(-ENOMEM);
	kref_init(&s->ref);
	s->ncpu = ncpu;
	s->trace_size = trace_size;
	s->mte_size = mte_size;
	s->trace = kcalloc(ncpu, sizeof(*s->trace), GFP_KERNEL);
	s->mte = kcalloc(ncpu, sizeof(*s->mte), GFP_KERNEL);
	if (!s->trace || !s->mte)
		goto fail;
	for (cpu = 0; cpu < ncpu; cpu++) {
		err = pt_buf_alloc(&s->trace[cpu], trace_size, cpu,
				   PITRACE_KIND_TRACE);
		if (err)
			goto fail;
		err = pt_buf_alloc(&s->mte[cpu], mte_size, cpu,
				   PITRACE_KIND_MTE);
		if (err)
			goto fail;
	}
	pt_set_reset(s, mode);
	return s;
fail:
	pt_set_release(&s->ref);
	return ERR_PTR(err);
}

void pt_set_release(struct kref *ref)
{
	struct pt_set *s = container_of(ref, struct pt_set, ref);
	u32 cpu;

	for (cpu = 0; cpu < s->ncpu; cpu++) {
		if (s->trace)
			pt_buf_free(&s->trace[cpu]);
		if (s->mte)
			pt_buf_free(&s->mte[cpu]);
	}
	kfree(s->trace);
	kfree(s->mte);
	kfree(s);
}

static void pt_buf_reset(struct pt_buf *b, u32 mode)
{
	struct pitrace_buf_hdr *h = b->hdr;

	memset(h, 0, sizeof(*h));
	h->magic = PITRACE_BUF_MAGIC;
	h->abi = PITRACE_ABI_VERSION;
	h->cpu = b->cpu;
	h->kind = b->kind;
	h->mode = mode;
	h->seg_size = b->seg_size;
	h->nseg = b->nseg;
	h->data_offset = PAGE_SIZE;
	h->cur = PITRACE_NO_SEG;
	b->cur = PITRACE_NO_SEG;
	b->used = 0;
	b->have_high = false;
	b->busy = 0;
	b->nested_lost = 0;
}

/* Only while no writer can run (not on, or after synchronize_rcu). */
void pt_set_reset(struct pt_set *s, u32 mode)
{
	u32 cpu;

	s->mode = mode;
	for (cpu = 0; cpu < s->ncpu; cpu++) {
		pt_buf_reset(&s->trace[cpu], mode);
		pt_buf_reset(&s->mte[cpu], mode);
	}
}

/* Does this buffer hand its complete segments to the drainer? */
static inline bool pt_drained(struct pt_buf *b, u32 mode)
{
	return mode == PITRACE_MODE_CONT ||
	       (mode == PITRACE_MODE_WRAP && b->kind == PITRACE_KIND_MTE);
}

static void pt_complete(struct pt_buf *b, u32 mode)
{
	struct pitrace_buf_hdr *h = b->hdr;
	struct pitrace_seg *sg = &h->seg[b->cur];

	WRITE_ONCE(sg->used, b->used);
	WRITE_ONCE(sg->seq, h->next_seq);
	WRITE_ONCE(h->next_seq, h->next_seq + 1);
	/*
	 * used, seq and the records before DONE: pairs with the drainer's
	 * atomic load of seg[].state before it reads them (libperfutil/
	 * kmodbackend, mapping.segments) and with the cmpxchg of
	 * pt_ioc_release, which gives a DONE segment back.
	 */
	smp_store_release(&sg->state, PITRACE_SEG_DONE);
	b->cur = PITRACE_NO_SEG;
	WRITE_ONCE(h->cur, PITRACE_NO_SEG);
	b->used = 0;
	if (pt_drained(b, mode))
		pt_wake();
}

static void pt_start_seg(struct pt_buf *b, u32 i)
{
	struct pitrace_seg *sg = &b->hdr->seg[i];

	WRITE_ONCE(sg->used, 0);
	WRITE_ONCE(sg->records, 0);
	b->cur = i;
	b->used = 0;
	b->have_high = false;
	WRITE_ONCE(b->hdr->cur, i);
}

static bool pt_next_seg(struct pt_buf *b)
{
	u32 i;

	for (i = 0; i < b->nseg; i++) {
		u32 *st = &b->hdr->seg[i].state;

		/*
		 * pairs with the full barrier of pt_ioc_release's cmpxchg
		 * (DONE -> FREE): the drainer's copy of the segment is
		 * complete before this writer fills it again
		 */
		if (smp_load_acquire(st) == PITRACE_SEG_FREE &&
		    cmpxchg(st, PITRACE_SEG_FREE, PITRACE_SEG_FILLING) ==
		    PITRACE_SEG_FREE) {
			pt_start_seg(b, i);
			return true;
		}
	}
	return false;
}

/* wrap mode, trace buffer: reuse the oldest complete segment */
static bool pt_reuse_oldest(struct pt_buf *b)
{
	struct pitrace_buf_hdr *h = b->hdr;
	u32 i, best = PITRACE_NO_SEG;
	u64 seq = 0;

	for (i = 0; i < b->nseg; i++) {
		if (READ_ONCE(h->seg[i].state) != PITRACE_SEG_DONE)
			continue;
		if (best == PITRACE_NO_SEG || h->seg[i].seq < seq) {
			best = i;
			seq = h->seg[i].seq;
		}
	}
	if (best == PITRACE_NO_SEG)
		return false;
	if (cmpxchg(&h->seg[best].state, PITRACE_SEG_DONE,
		    PITRACE_SEG_FILLING) != PITRACE_SEG_DONE)
		return false;
	WRITE_ONCE(h->lost, h->lost + h->seg[best].records);
	WRITE_ONCE(h->records, h->records - h->seg[best].records);
	pt_start_seg(b, best);
	return true;
}

static inline u32 pt_th_need(struct pt_buf *b, u64 t)
{
	return (!b->have_high || (u32)(t >> 32) != b->high) ?
		PT_TIME_HIGH_SIZE : 0;
}

static u32 pt_rec_len(int layout, u32 flen, u32 slen);
static void pt_emit_raw(struct pt_buf *b, u16 major, u32 minor, int layout,
			u64 t, const void *fields, u32 flen, const char *str,
			u32 slen, u32 len);

/*
 * Normal mode keeps room at the end of every segment for the BUFFER_FULL
 * record (and a TIME_HIGH before it) that says where and why the trace
 * stopped: docs/trace-format.md.
 */
#define PT_FULL_LEN	(PITRACE_REC_HDR_SIZE + 4)
#define PT_FULL_RSV	(PT_TIME_HIGH_SIZE + PT_FULL_LEN)

static bool pt_have_free_seg(struct pt_buf *b)
{
	u32 i;

	for (i = 0; i < b->nseg; i++)
		if (READ_ONCE(b->hdr->seg[i].state) == PITRACE_SEG_FREE)
			return true;
	return false;
}

/* normal mode: the buffer is full; say so in it, then stop. */
static void pt_mark_full(struct pt_buf *b, u64 t)
{
	struct pitrace_buf_hdr *h = b->hdr;
	struct pitrace_rec_buf_full f = { b->kind == PITRACE_KIND_MTE };

	BUILD_BUG_ON(PITRACE_REC_HDR_SIZE + sizeof(f) != PT_FULL_LEN);
	if (b->cur != PITRACE_NO_SEG &&
	    b->used + pt_th_need(b, t) + PT_FULL_LEN <= b->seg_size) {
		pt_emit_raw(b, PITRACE_MAJOR_SYS, PITRACE_SYS_BUF_FULL,
			    PITRACE_LAYOUT_FIXED, t, &f, sizeof(f), NULL, 0,
			    PT_FULL_LEN);
		WRITE_ONCE(h->records, h->records + 1);
		WRITE_ONCE(h->bytes, h->bytes + PT_FULL_LEN);
	}
	WRITE_ONCE(h->flags, h->flags | PITRACE_BUF_FULL);
	pt_buffer_full();
}

/* Make room for need bytes (plus a TIME_HIGH record if due). */
static bool pt_room(struct pt_buf *b, u32 mode, u32 need, u64 t)
{
	u32 rsv = mode == PITRACE_MODE_NORMAL ? PT_FULL_RSV : 0;

	if (b->hdr->flags & PITRACE_BUF_FULL)
		return false;
	if (b->cur != PITRACE_NO_SEG) {
		if (b->used + pt_th_need(b, t) + need + rsv <= b->seg_size)
			return true;
		if (mode == PITRACE_MODE_NORMAL && !pt_have_free_seg(b)) {
			pt_mark_full(b, t);
			return false;
		}
		pt_complete(b, mode);
	}
	if (pt_next_seg(b))
		return true;
	if (mode == PITRACE_MODE_WRAP && b->kind == PITRACE_KIND_TRACE)
		return pt_reuse_oldest(b);
	if (mode == PITRACE_MODE_NORMAL)
		pt_mark_full(b, t);
	return false;
}

static void pt_put_hdr(u8 *p, int layout, u32 len, u16 major, u32 minor,
		       u64 t)
{
	struct pitrace_rec_hdr h = {
		.type_len = PITRACE_TYPELEN(layout, len),
		.major = major,
		.minor = minor,
		.time_lo = (u32)t,
	};

	memcpy(p, &h, sizeof(h));
}

static void pt_emit_raw(struct pt_buf *b, u16 major, u32 minor, int layout,
			u64 t, const void *fields, u32 flen, const char *str,
			u32 slen, u32 len)
{
	u8 *p;
	u32 off, end;
	struct pitrace_seg *sg = &b->hdr->seg[b->cur];

	if (pt_th_need(b, t)) {
		struct pitrace_rec_time_high th = { (u32)(t >> 32) };

		p = b->data + (size_t)b->cur * b->seg_size + b->used;
		pt_put_hdr(p, PITRACE_LAYOUT_FIXED, PT_TIME_HIGH_SIZE,
			   PITRACE_MAJOR_SYS, PITRACE_SYS_TIME_HIGH, t);
		memcpy(p + PITRACE_REC_HDR_SIZE, &th, sizeof(th));
		b->used += PT_TIME_HIGH_SIZE;
		b->high = th.high;
		b->have_high = true;
	}
	p = b->data + (size_t)b->cur * b->seg_size + b->used;
	pt_put_hdr(p, layout, len, major, minor, t);
	off = PITRACE_REC_HDR_SIZE;
	if (flen) {
		/* fields are whole u32 words: a short loop beats memcpy here */
		const u32 *src = fields;
		u32 *dst = (u32 *)(p + off);
		u32 i;

		for (i = 0; i < flen / 4; i++)
			dst[i] = src[i];
		off += flen;
	}
	if (layout == PITRACE_LAYOUT_BYTES) {
		memcpy(p + off, &slen, 4);
		off += 4;
	}
	if (layout == PITRACE_LAYOUT_STRING || layout == PITRACE_LAYOUT_BYTES) {
		if (slen)
			memcpy(p + off, str, slen);
		off += slen;
	}
	end = len;
	if (off < end)
		memset(p + off, 0, end - off);	/* NUL and padding */
	b->used += len;
	WRITE_ONCE(sg->records, sg->records + 1);
	/*
	 * publish the bytes before the length: pairs with the atomic load
	 * of seg[].used by a reader of the FILLING segment (libperfutil/
	 * kmodbackend, mapping.segments with partial)
	 */
	smp_store_release(&sg->used, b->used);
}

static u32 pt_rec_len(int layout, u32 flen, u32 slen)
{
	u32 n = PITRACE_REC_HDR_SIZE + flen;

	if (layout == PITRACE_LAYOUT_STRING)
		n += slen + 1;
	else if (layout == PITRACE_LAYOUT_BYTES)
		n += 4 + slen;
	return (n + 3) & ~3U;
}

/* The writer proper: b is owned by the caller (its CPU, irqs off). */
static bool pt_emit(struct pt_buf *b, u32 mode, u16 major, u32 minor,
		    int layout, u64 t, const void *fields, u32 flen,
		    const char *str, u32 slen)
{
	struct pitrace_buf_hdr *h = b->hdr;
	u32 len = pt_rec_len(layout, flen, slen);

	if (len > PITRACE_MAX_RECORD || len + PT_TIME_HIGH_SIZE > b->seg_size)
		goto lost;
	if (h->pending && !(h->flags & PITRACE_BUF_FULL)) {
		struct pitrace_rec_lost lf = { h->pending, PITRACE_LOST_FULL };
		u32 llen = pt_rec_len(PITRACE_LAYOUT_FIXED, sizeof(lf), 0);

		if (!pt_room(b, mode, llen + len, t))
			goto lost;
		pt_emit_raw(b, PITRACE_MAJOR_SYS, PITRACE_SYS_LOST,
			    PITRACE_LAYOUT_FIXED, t, &lf, sizeof(lf), NULL, 0,
			    llen);
		WRITE_ONCE(h->pending, 0);
	}
	if (!pt_room(b, mode, len, t))
		goto lost;
	pt_emit_raw(b, major, minor, layout, t, fields, flen, str, slen, len);
	WRITE_ONCE(h->records, h->records + 1);
	WRITE_ONCE(h->bytes, h->bytes + len);
	return true;
lost:
	WRITE_ONCE(h->lost, h->lost + 1);
	WRITE_ONCE(h->pending, h->pending + 1);
	return false;
}

/*
 * Write into a given buffer.  The caller guarantees exclusive access: the
 * facility is quiesced (no writer can run) and b is not being written.
 */
bool pt_write_buf(struct pt_set *s, struct pt_buf *b, u16 major, u32 minor,
		  int layout, const void *fields, u32 flen, const char *str,
		  u32 slen)
{
	unsigned long flags;
	bool ok;

	local_irq_save(flags);
	ok = pt_emit(b, s->mode, major, minor, layout,
		     ktime_get_mono_fast_ns(), fields, flen, str, slen);
	local_irq_restore(flags);
	return ok;
}

/*
 * Write one record into this CPU's trace or MTE buffer.  Callable from any
 * context: process, softirq, hardirq, NMI.  Returns false if the record was
 * not stored (tracing off, disabled, or lost).
 */
bool pt_write(u32 kind, u16 major, u32 minor, int layout, const void *fields,
	      u32 flen, const char *str, u32 slen)
{
	unsigned long flags;
	struct pt_set *s;
	struct pt_buf *b;
	bool ok = false;
	u32 cpu;

	local_irq_save(flags);
	if (!READ_ONCE(pt_active))
		goto out;
	s = rcu_dereference_sched(pt_live_set);
	if (!s)
		goto out;
	cpu = smp_processor_id();
	if (cpu >= s->ncpu)
		goto out;
	b = kind == PITRACE_KIND_MTE ? &s->mte[cpu] : &s->trace[cpu];
	if (b->busy) {
		b->nested_lost++;
		goto out;
	}
	b->busy = 1;
	ok = pt_emit(b, s->mode, major, minor, layout,
		     ktime_get_mono_fast_ns(), fields, flen, str, slen);
	b->busy = 0;
out:
	local_irq_restore(flags);
	return ok;
}

/*
 * A writer session: several records of this CPU's trace or MTE buffer with
 * one time stamp and nothing else between them (the busy guard is held
 * from begin to end, so an NMI's record is dropped rather than put between
 * them).  Interrupts are off from pt_write_begin() to pt_write_end(), which
 * must be called when begin returned true.
 */
bool pt_write_begin(struct pt_wsess *w, u32 kind)
{
	u32 cpu;

	local_irq_save(w->flags);
	w->b = NULL;
	if (!READ_ONCE(pt_active))
		goto out;
	w->s = rcu_dereference_sched(pt_live_set);
	if (!w->s)
		goto out;
	cpu = smp_processor_id();
	if (cpu >= w->s->ncpu)
		goto out;
	w->b = kind == PITRACE_KIND_MTE ? &w->s->mte[cpu] : &w->s->trace[cpu];
	if (w->b->busy) {
		w->b->nested_lost++;
		w->b = NULL;
		goto out;
	}
	w->b->busy = 1;
	w->t = ktime_get_mono_fast_ns();
	return true;
out:
	local_irq_restore(w->flags);
	return false;
}

bool pt_write_rec(struct pt_wsess *w, u16 major, u32 minor, int layout,
		  const void *fields, u32 flen, const char *str, u32 slen)
{
	lockdep_assert_irqs_disabled();
	return pt_emit(w->b, w->s->mode, major, minor, layout, w->t, fields,
		       flen, str, slen);
}

void pt_write_end(struct pt_wsess *w)
{
	w->b->busy = 0;
	local_irq_restore(w->flags);
}

/*
 * At off (writers quiesced): the partial segments become DONE so that user
 * space finds every record in DONE segments ordered by seq, and the guard's
 * drops are folded into the counts.
 */
void pt_set_finish(struct pt_set *s)
{
	u32 cpu, k;

	for (cpu = 0; cpu < s->ncpu; cpu++) {
		for (k = 0; k < 2; k++) {
			struct pt_buf *b = k ? &s->mte[cpu] : &s->trace[cpu];

			if (b->nested_lost) {
				b->hdr->lost += b->nested_lost;
				b->nested_lost = 0;
			}
			if (b->cur != PITRACE_NO_SEG && b->used)
				pt_complete(b, s->mode);
		}
	}
}

/* bytes held (complete and current segments) */
u64 pt_buf_used(struct pt_buf *b)
{
	u64 n = 0;
	u32 i;

	for (i = 0; i < b->nseg; i++) {
		u32 st = READ_ONCE(b->hdr->seg[i].state);

		if (st != PITRACE_SEG_FREE)
			n += READ_ONCE(b->hdr->seg[i].used);
	}
	return n;
}
