/* Unit tests for certificate reload (stream/certreload.h): load and verify on a worker, swap on
 * the loop, all or nothing, only when changed, with the worker pool's notify hook instead of
 * lws. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <stream/certreload.h>
#include <stream/workq.h>

#include "testutil.h"

struct fixture {
	char dir[256];
	char cert[300], key[300], ca[300], cert2[300], key2[300];
	struct st_workq *wq;
	int efd;
	SSL_CTX *ctx, *ctx2;
	int calls, rc;
	char reason[1024];
};

/* ---- certificates ---------------------------------------------------------------------- */

static X509 *self_signed(EVP_PKEY *key, const char *cn)
{
	X509 *x = X509_new();
	assert_non_null(x);
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), 0);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_set_pubkey(x, key);
	X509_NAME *name = X509_get_subject_name(x);
	X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
	X509_set_issuer_name(x, name);
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	return x;
}

/* Writes @path through a temporary file and a rename, as a rotation does (a new inode). */
static void write_file(const char *path, const void *p, size_t n)
{
	char tmp[320];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(rename(tmp, path), 0);
}

static void write_pem(const char *path, X509 *x, EVP_PKEY *key)
{
	BIO *b = BIO_new(BIO_s_mem());
	if (x)
		assert_true(PEM_write_bio_X509(b, x));
	if (key)
		assert_true(PEM_write_bio_PrivateKey(b, key, NULL, NULL, 0, NULL, NULL));
	char *p;
	long n = BIO_get_mem_data(b, &p);
	write_file(path, p, (size_t)n);
	BIO_free(b);
}

/* A fresh key and certificate named @cn at @cert / @key (and the certificate as @ca too). */
static X509 *mint(const char *cert, const char *key, const char *ca, const char *cn)
{
	EVP_PKEY *k = EVP_EC_gen("P-256");
	assert_non_null(k);
	X509 *x = self_signed(k, cn);
	write_pem(cert, x, NULL);
	write_pem(key, NULL, k);
	if (ca)
		write_pem(ca, x, NULL);
	EVP_PKEY_free(k);
	return x;
}

static SSL_CTX *ctx_with(const char *cert, const char *key)
{
	SSL_CTX *c = SSL_CTX_new(TLS_method());
	assert_non_null(c);
	assert_int_equal(SSL_CTX_use_certificate_chain_file(c, cert), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey_file(c, key, SSL_FILETYPE_PEM), 1);
	return c;
}

static bool ctx_has(SSL_CTX *c, X509 *x)
{
	X509 *now = SSL_CTX_get0_certificate(c);
	return now && X509_cmp(now, x) == 0;
}

/* ---- the loop ---------------------------------------------------------------------------- */

static void notify(void *user)
{
	uint64_t one = 1;
	ssize_t w = write(*(int *)user, &one, sizeof one);
	(void)w;
}

static void on_done(int rc, const char *reason, void *user)
{
	struct fixture *fx = user;
	fx->calls++;
	fx->rc = rc;
	snprintf(fx->reason, sizeof fx->reason, "%s", reason);
}

/* Runs completions until @want callbacks have come (bounded: 10 s). */
static void wait_calls(struct fixture *fx, int want)
{
	for (int i = 0; fx->calls < want && i < 1000; i++) {
		struct pollfd p = {.fd = fx->efd, .events = POLLIN};
		if (poll(&p, 1, 10) > 0) {
			uint64_t v;
			ssize_t r = read(fx->efd, &v, sizeof v);
			(void)r;
		}
		st_workq_run_completions(fx->wq);
	}
	assert_int_equal(fx->calls, want);
}

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof *fx);
	assert_non_null(fx);
	assert_int_equal(test_mkdtemp(fx->dir, sizeof fx->dir, "certreload"), 0);
	snprintf(fx->cert, sizeof fx->cert, "%s/tls.crt", fx->dir);
	snprintf(fx->key, sizeof fx->key, "%s/tls.key", fx->dir);
	snprintf(fx->ca, sizeof fx->ca, "%s/ca.crt", fx->dir);
	snprintf(fx->cert2, sizeof fx->cert2, "%s/two.crt", fx->dir);
	snprintf(fx->key2, sizeof fx->key2, "%s/two.key", fx->dir);
	fx->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	assert_true(fx->efd >= 0);
	assert_int_equal(st_workq_new(&fx->wq, NULL, 1, 2), 0);
	st_workq_set_notify(fx->wq, notify, &fx->efd);
	X509_free(mint(fx->cert, fx->key, fx->ca, "first"));
	X509_free(mint(fx->cert2, fx->key2, NULL, "second-ctx"));
	fx->ctx = ctx_with(fx->cert, fx->key);
	fx->ctx2 = ctx_with(fx->cert2, fx->key2);
	*state = fx;
	return 0;
}

static void gate_set(bool open);

static int teardown(void **state)
{
	struct fixture *fx = *state;
	gate_set(true); /* a test that failed with the gate closed must not hang the join */
	st_workq_free(fx->wq);
	SSL_CTX_free(fx->ctx);
	SSL_CTX_free(fx->ctx2);
	close(fx->efd);
	rmtree(fx->dir);
	free(fx);
	return 0;
}

static struct st_certreload *one(struct fixture *fx)
{
	struct st_certreload_files f = {"stream", fx->cert, fx->key, fx->ca};
	struct st_certreload *r;
	assert_int_equal(st_certreload_new(&r, fx->wq, &f, 1, on_done, fx), 0);
	st_certreload_set_ctx(r, 0, fx->ctx);
	return r;
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_st_certreload_start__swaps_new_material(void **state)
{
	struct fixture *fx = *state;
	struct st_certreload *r = one(fx);
	X509_STORE *old_store = SSL_CTX_get_cert_store(fx->ctx);
	X509 *fresh = mint(fx->cert, fx->key, fx->ca, "rotated");
	assert_false(ctx_has(fx->ctx, fresh));
	assert_int_equal(st_certreload_start(r, 0), 0);
	wait_calls(fx, 1);
	assert_int_equal(fx->rc, 0);
	assert_string_equal(fx->reason, "");
	assert_true(ctx_has(fx->ctx, fresh)); /* new handshakes use it */
	assert_ptr_not_equal(SSL_CTX_get_cert_store(fx->ctx), old_store);
	X509_free(fresh);
	st_certreload_free(r);
}

static void test_st_certreload_start__if_changed(void **state)
{
	struct fixture *fx = *state;
	struct st_certreload *r = one(fx);
	/* The first stamps are those at new: nothing to do. */
	assert_int_equal(st_certreload_start(r, ST_CERTRELOAD_IF_CHANGED), 0);
	wait_calls(fx, 1);
	assert_int_equal(fx->rc, 1);
	X509 *fresh = mint(fx->cert, fx->key, fx->ca, "rotated");
	assert_int_equal(st_certreload_start(r, ST_CERTRELOAD_IF_CHANGED), 0);
	wait_calls(fx, 2);
	assert_int_equal(fx->rc, 0);
	assert_true(ctx_has(fx->ctx, fresh));
	/* Swapped: unchanged again from here. */
	assert_int_equal(st_certreload_start(r, ST_CERTRELOAD_IF_CHANGED), 0);
	wait_calls(fx, 3);
	assert_int_equal(fx->rc, 1);
	X509_free(fresh);
	st_certreload_free(r);
}

static void test_st_certreload_start__bad_files_keep_the_old(void **state)
{
	struct fixture *fx = *state;
	struct st_certreload *r = one(fx);
	X509 *before = X509_dup(SSL_CTX_get0_certificate(fx->ctx));

	/* A key that is not the certificate's. */
	char scratch[300];
	snprintf(scratch, sizeof scratch, "%s/scratch.crt", fx->dir);
	X509 *other = mint(fx->cert, scratch, NULL, "other"); /* its key goes to scratch */
	X509_free(mint(scratch, fx->key, NULL, "key-only"));  /* another key at fx->key */
	assert_int_equal(st_certreload_start(r, 0), 0);
	wait_calls(fx, 1);
	assert_int_equal(fx->rc, -EKEYREJECTED);
	assert_non_null(strstr(fx->reason, fx->key));
	assert_non_null(strstr(fx->reason, "does not match"));
	assert_true(ctx_has(fx->ctx, before));

	/* No PEM at all. */
	write_file(fx->cert, "garbage\n", 8);
	assert_int_equal(st_certreload_start(r, 0), 0);
	wait_calls(fx, 2);
	assert_int_equal(fx->rc, -EBADMSG);
	assert_non_null(strstr(fx->reason, "no certificate"));

	/* A file that is gone. */
	assert_int_equal(unlink(fx->cert), 0);
	assert_int_equal(st_certreload_start(r, 0), 0);
	wait_calls(fx, 3);
	assert_int_equal(fx->rc, -ENOENT);
	assert_non_null(strstr(fx->reason, fx->cert));
	/* ... also when only "if changed" was asked: its stamp changed. */
	assert_int_equal(st_certreload_start(r, ST_CERTRELOAD_IF_CHANGED), 0);
	wait_calls(fx, 4);
	assert_int_equal(fx->rc, -ENOENT);
	assert_true(ctx_has(fx->ctx, before));
	X509_free(other);
	X509_free(before);
	st_certreload_free(r);
}

static void test_st_certreload_start__all_or_nothing(void **state)
{
	struct fixture *fx = *state;
	const struct st_certreload_files f[2] = {{"tunnel", fx->cert, fx->key, fx->ca},
	                                         {"stream", fx->cert2, fx->key2, NULL}};
	struct st_certreload *r;
	assert_int_equal(st_certreload_new(&r, fx->wq, f, 2, on_done, fx), 0);
	st_certreload_set_ctx(r, 0, fx->ctx);
	st_certreload_set_ctx(r, 1, fx->ctx2);
	st_certreload_set_ctx(r, 7, fx->ctx2); /* out of range: ignored */
	X509 *before = X509_dup(SSL_CTX_get0_certificate(fx->ctx));
	X509 *fresh = mint(fx->cert, fx->key, fx->ca, "rotated");
	write_file(fx->key2, "not a key\n", 10);
	assert_int_equal(st_certreload_start(r, 0), 0);
	wait_calls(fx, 1);
	assert_int_equal(fx->rc, -EBADMSG);
	assert_non_null(strstr(fx->reason, "no private key"));
	assert_true(ctx_has(fx->ctx, before)); /* the good context did not move either */
	/* Fixed: both swap. */
	X509 *fresh2 = mint(fx->cert2, fx->key2, NULL, "second-rotated");
	assert_int_equal(st_certreload_start(r, 0), 0);
	wait_calls(fx, 2);
	assert_int_equal(fx->rc, 0);
	assert_true(ctx_has(fx->ctx, fresh));
	assert_true(ctx_has(fx->ctx2, fresh2));
	X509_free(before);
	X509_free(fresh);
	X509_free(fresh2);
	st_certreload_free(r);
}

static void test_st_certreload_start__unknown_ctx(void **state)
{
	struct fixture *fx = *state;
	struct st_certreload_files f = {"stream", fx->cert, fx->key, fx->ca};
	struct st_certreload *r;
	assert_int_equal(st_certreload_new(&r, fx->wq, &f, 1, on_done, fx), 0);
	assert_int_equal(st_certreload_start(r, 0), 0);
	wait_calls(fx, 1);
	assert_int_equal(fx->rc, -ENODEV);
	st_certreload_free(r);
}

/* A gate that holds the only worker, so a reload waits in the queue. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;

static void gate_work(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&gate_lock);
	while (!gate_open)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

static void gate_done(void *arg, int status)
{
	(void)arg;
	(void)status;
}

static void gate_set(bool open)
{
	pthread_mutex_lock(&gate_lock);
	gate_open = open;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

static void test_st_certreload_start__coalesces_and_busy(void **state)
{
	struct fixture *fx = *state;
	struct st_certreload *r = one(fx);
	gate_set(false);
	assert_int_equal(st_workq_submit(fx->wq, gate_work, gate_done, NULL), 0);
	assert_int_equal(st_certreload_start(r, 0), 0);
	/* While it waits: more starts make one more attempt, not one each. */
	assert_int_equal(st_certreload_start(r, 0), 0);
	assert_int_equal(st_certreload_start(r, ST_CERTRELOAD_IF_CHANGED), 0);
	gate_set(true);
	wait_calls(fx, 2);
	assert_int_equal(fx->rc, 1); /* the second attempt had the last call's flags */
	for (int i = 0; i < 20; i++)
		st_workq_run_completions(fx->wq);
	assert_int_equal(fx->calls, 2);

	/* The pool full: -EAGAIN and no callback. */
	gate_set(false);
	int held = 0;
	/* Full means full once the workers have taken what they will: a worker that was idle may
	 * take a job off the queue just after a submit failed (that was a 2 % flake). */
	for (int round = 0; round < 50; round++) {
		while (held < 64 && st_workq_submit(fx->wq, gate_work, gate_done, NULL) == 0)
			held++;
		usleep(5000);
		if (st_workq_submit(fx->wq, gate_work, gate_done, NULL) != 0)
			break;
		held++;
	}
	assert_true(held < 64);
	assert_int_equal(st_certreload_start(r, 0), -EAGAIN);
	gate_set(true);
	for (int i = 0; i < 200 && st_workq_pending(fx->wq) > 0; i++) {
		usleep(1000);
		st_workq_run_completions(fx->wq);
	}
	st_workq_run_completions(fx->wq);
	assert_int_equal(fx->calls, 2);
	st_certreload_free(r);
}

static void test_st_certreload_free__during_a_reload(void **state)
{
	struct fixture *fx = *state;
	struct st_certreload *r = one(fx);
	gate_set(false);
	assert_int_equal(st_workq_submit(fx->wq, gate_work, gate_done, NULL), 0);
	assert_int_equal(st_certreload_start(r, 0), 0);
	st_certreload_free(r); /* its job still waits: freed with its completion */
	gate_set(true);
	for (int i = 0; i < 200 && st_workq_pending(fx->wq) > 0; i++) {
		usleep(1000);
		st_workq_run_completions(fx->wq);
	}
	st_workq_run_completions(fx->wq);
	assert_int_equal(fx->calls, 0); /* no callback after free; LSan checks the memory */
	st_certreload_free(NULL);
}

static void test_st_certreload_new__bad_arguments(void **state)
{
	struct fixture *fx = *state;
	struct st_certreload *r = (struct st_certreload *)1;
	struct st_certreload_files f = {"stream", fx->cert, fx->key, NULL};
	assert_int_equal(st_certreload_new(&r, fx->wq, &f, 0, on_done, fx), -EINVAL);
	assert_null(r);
	assert_int_equal(
	        st_certreload_new(&r, fx->wq, &f, ST_CERTRELOAD_MAX_CONTEXTS + 1, on_done, fx),
	        -EINVAL);
	f.key_path = NULL;
	assert_int_equal(st_certreload_new(&r, fx->wq, &f, 1, on_done, fx), -EINVAL);
	f.key_path = fx->key;
	f.name = "a-name-that-is-far-too-long-for-a-log-line";
	assert_int_equal(st_certreload_new(&r, fx->wq, &f, 1, on_done, fx), -EINVAL);
	f.name = "ok";
	assert_int_equal(st_certreload_new(&r, fx->wq, &f, 1, NULL, fx), -EINVAL);
	assert_int_equal(st_certreload_new(&r, fx->wq, &f, 1, on_done, fx), 0);
	st_certreload_free(r);
}

static void test_st_cert_expiry_warning__thresholds(void **state)
{
	(void)state;
	const int64_t day = 86400, t0 = 1800000000;
	/* 365 days: warned below 30 days left, not before */
	assert_false(st_cert_expiry_warning(t0 + 334 * day, t0, t0 + 365 * day));
	assert_true(st_cert_expiry_warning(t0 + 336 * day, t0, t0 + 365 * day));
	/* 2 minutes: warned below 40 s left (a third) */
	assert_false(st_cert_expiry_warning(t0 + 79, t0, t0 + 120));
	assert_true(st_cert_expiry_warning(t0 + 81, t0, t0 + 120));
	/* expired */
	assert_true(st_cert_expiry_warning(t0 + 200, t0, t0 + 120));
	/* unknown */
	assert_false(st_cert_expiry_warning(t0, 0, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(test_st_certreload_start__swaps_new_material, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_st_certreload_start__if_changed, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_st_certreload_start__bad_files_keep_the_old,
	                                        setup, teardown),
	        cmocka_unit_test_setup_teardown(test_st_certreload_start__all_or_nothing, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_st_certreload_start__unknown_ctx, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_st_certreload_start__coalesces_and_busy, setup,
	                                        teardown),
	        cmocka_unit_test_setup_teardown(test_st_certreload_free__during_a_reload, setup,
	                                        teardown),
	        cmocka_unit_test(test_st_cert_expiry_warning__thresholds),
	        cmocka_unit_test_setup_teardown(test_st_certreload_new__bad_arguments, setup,
	                                        teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
