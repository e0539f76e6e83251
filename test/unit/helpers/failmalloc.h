/*
 * failmalloc.h — fail the Nth allocation (nghttp2's failmalloc_test.c idea).
 *
 * Unit tests are linked with -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc, so every allocation
 * made by our own static code goes through here. Arm a countdown, run the code, and assert that it
 * returned -ENOMEM cleanly and leaked nothing (LeakSanitizer checks the leak part at exit).
 *
 * Typical loop:
 *     for (int n = 0;; n++) {
 *             failmalloc_fail_after(n);
 *             int rc = thing_under_test();
 *             failmalloc_off();
 *             if (rc == 0) break;           // ran out of allocations to fail
 *             assert_int_equal(rc, -ENOMEM);
 *     }
 */
#ifndef ST_TEST_FAILMALLOC_H
#define ST_TEST_FAILMALLOC_H

/* The next @n allocations succeed, the one after that fails, and later ones succeed again. */
void failmalloc_fail_after(int n);
/* Stop failing. */
void failmalloc_off(void);
/* How many allocations failed since the last arm. */
int failmalloc_failures(void);

#endif
