/* Free heap pages back to the kernel after bursts (stream/heaptrim.h). */
#include <stream/heaptrim.h>
#include <stream/log.h>

#include <malloc.h>
#include <string.h>
#include <time.h>

bool st_heap_trim_wanted(size_t free_bytes, size_t used_bytes, size_t low_free_bytes)
{
	if (free_bytes < ST_HEAP_TRIM_MIN_FREE_BYTES)
		return false;
	if (low_free_bytes > free_bytes ||
	    free_bytes - low_free_bytes < ST_HEAP_TRIM_MIN_FREE_BYTES)
		return false;
	/* free / used >= percent / 100, without overflow for any size_t. */
	return free_bytes / ST_HEAP_TRIM_FREE_PERCENT >= used_bytes / 100u;
}

bool st_heap_trim_step(size_t *low_free_bytes, size_t free_bytes, size_t used_bytes)
{
	if (*low_free_bytes > free_bytes)
		*low_free_bytes = free_bytes;
	if (!st_heap_trim_wanted(free_bytes, used_bytes, *low_free_bytes))
		return false;
	*low_free_bytes = free_bytes; /* handed back: only growth from here is new */
	return true;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

bool st_heap_trim_tick(size_t *low_free_bytes, struct st_heap_trim_result *res)
{
	struct st_heap_trim_result r = {0};
	struct mallinfo2 mi = mallinfo2();
	/* fordblks: free bytes in the arenas (not mmapped chunks, which go back when freed). */
	r.free_bytes = mi.fordblks;
	r.used_bytes = mi.uordblks;
	if (st_heap_trim_step(low_free_bytes, r.free_bytes, r.used_bytes)) {
		double t0 = now_ms();
		malloc_trim(0);
		r.elapsed_ms = now_ms() - t0;
		r.trimmed = true;
	}
	if (res)
		*res = r;
	return r.trimmed;
}

static void on_tick(lws_sorted_usec_list_t *sul)
{
	struct st_heap_trimmer *t = lws_container_of(sul, struct st_heap_trimmer, sul);
	struct st_heap_trim_result r;
	if (st_heap_trim_tick(&t->low_free_bytes, &r)) {
		t->trims++;
		st_dbg("heap: %zu KiB free beside %zu KiB in use; pages handed back in %.2f ms",
		       r.free_bytes / 1024, r.used_bytes / 1024, r.elapsed_ms);
	}
	lws_sul_schedule(t->ctx, 0, &t->sul, on_tick, (lws_usec_t)t->interval_ms * LWS_US_PER_MS);
}

void st_heap_trimmer_start(struct st_heap_trimmer *t, struct lws_context *ctx, unsigned interval_ms)
{
	memset(t, 0, sizeof *t);
	t->ctx = ctx;
	t->interval_ms = interval_ms;
	/* From now on the trimmer gives free pages back, so glibc need not at every free() that
	 * leaves more than 128 KiB free at the heap's top: with bulk transfers that trimmed and
	 * faulted in again the 64 KiB read buffers freed and taken every loop round (15 % of
	 * cloudstream's samples in page faults and 5 % in brk, issue 12). */
	if (interval_ms > 0)
		mallopt(M_TRIM_THRESHOLD, ST_HEAP_TRIM_AUTO_BYTES);
	if (interval_ms > 0)
		lws_sul_schedule(ctx, 0, &t->sul, on_tick, (lws_usec_t)interval_ms * LWS_US_PER_MS);
}

void st_heap_trimmer_stop(struct st_heap_trimmer *t)
{
	if (t->ctx != NULL)
		lws_sul_cancel(&t->sul);
	t->ctx = NULL;
}
