/*
 * cloudstream/src/servecert_int.h — what servecert.c (the cache, the timers; loop thread),
 * servecert_hello.c (the ClientHello; loop thread) and servecert_issue.c (keys, certificates and
 * apiserver calls; worker threads) share: the cache and one job.
 */
#ifndef CLOUDSTREAM_SERVECERT_INT_H
#define CLOUDSTREAM_SERVECERT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include <libwebsockets.h>

#include "registry.h"

struct cs_server;

enum cs_sc_job_kind {
	CS_SC_JOB_ISSUE = 0, /* a new key and certificate (ca) or CSR (csr) for the node */
	CS_SC_JOB_POLL,      /* csr: has the signer written status.certificate yet? */
};

/* The serving CA (ca mode): loaded at start-up, read-only afterwards (workers sign with it). */
struct cs_sc_ca {
	X509 *cert;
	EVP_PKEY *key;
};

struct cs_sc_job {
	struct cs_server *srv;
	const struct cs_sc_ca *ca; /* ca mode; borrowed, outlives the pool */
	enum cs_sc_job_kind kind;
	uint64_t entry_gen; /* which issue of the entry this job belongs to */
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	char csr_name[254]; /* POLL: the CSR; ISSUE (csr): the name the apiserver gave */
	bool approve;       /* ISSUE (csr): approve it ourselves */
	uint64_t validity_s;
	/* results (worker → loop) */
	EVP_PKEY *key;           /* ISSUE: the new key (owned by the job until taken) */
	X509 *cert;              /* the certificate, once there is one (owned until taken) */
	bool pending;            /* csr: created (and maybe approved), not signed yet */
	bool approve_forbidden;  /* csr: the approval subresource answered 403 */
	bool denied;             /* csr: a Denied or Failed condition */
	bool gone;               /* POLL: the CSR no longer exists (404) */
	char error[320];         /* "" on success */
	char approve_error[320]; /* csr: the approval failed otherwise (the CSR still waits) */
	char detail[160];        /* a condition's reason and message, the SANs asked for */
};

/* ---- the cache (servecert.c; read by servecert_hello.c), loop thread ---------------------- */

#define CS_SC_BUCKETS 1024u

struct cs_sc_entry {
	struct cs_sc_entry *next; /* hash chain */
	struct cs_servecert *sc;
	char node[CS_NODE_NAME_MAX_BYTES + 1];
	X509 *cert;    /* the node's certificate, NULL before the first (owned) */
	EVP_PKEY *key; /* its key (owned) */
	uint64_t gen;  /* bumped at each issue: answers of an older one are dropped */
	bool busy;     /* an issue is in progress: a job, or a CSR polled on the timer */
	bool fallback_logged;
	EVP_PKEY *pending_key; /* csr: the key of the CSR being polled (owned) */
	char csr_name[254];
	uint64_t poll_ms, pending_since_ms;
	uint64_t next_issue_ms; /* no issue starts before (backoff, or the gap between issues) */
	uint32_t failures;      /* in a row */
	uint64_t uncovered_retry_ms; /* a certificate that does not cover an address the node is
	                              * reached by is issued again at most this often: the Node
	                              * may not list that address, and each issue is a CSR */
	lws_sorted_usec_list_t sul;  /* the CSR's next poll, or the renewal */
};

struct cs_servecert {
	struct cs_server *srv;
	struct cs_sc_ca ca; /* ca mode */
	struct cs_sc_entry *b[CS_SC_BUCKETS];
	size_t n, max;
	bool stopping;
	bool approve_logged; /* the 403 on the approval subresource was said */
	bool no_node_logged;
	uint64_t handshakes_node, handshakes_default, issued, failures;
};

/* cs__sc_entry_get() - @node's entry, created when there is none and room for it (NULL when
 * not, or out of memory). */
struct cs_sc_entry *cs__sc_entry_get(struct cs_servecert *sc, const char *node);
/* cs__sc_issue_start() - start an issue of @e's certificate (@why for the log), unless one is
 * in progress, the daemon is stopping or the entry's backoff has not passed. */
void cs__sc_issue_start(struct cs_sc_entry *e, const char *why);

/* Worker side (servecert_issue.c). */
void cs__sc_job_work(void *arg);
/* Frees what the job still owns (key, cert) and the job. */
void cs__sc_job_free(struct cs_sc_job *j);

#endif /* CLOUDSTREAM_SERVECERT_INT_H */
