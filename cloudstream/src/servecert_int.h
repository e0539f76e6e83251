/*
 * cloudstream/src/servecert_int.h — what servecert.c (the cache, the ClientHello, the timers;
 * loop thread) and servecert_issue.c (keys, certificates and apiserver calls; worker threads)
 * share: one job.
 */
#ifndef CLOUDSTREAM_SERVECERT_INT_H
#define CLOUDSTREAM_SERVECERT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

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

/* Worker side (servecert_issue.c). */
void cs__sc_job_work(void *arg);
/* Frees what the job still owns (key, cert) and the job. */
void cs__sc_job_free(struct cs_sc_job *j);

#endif /* CLOUDSTREAM_SERVECERT_INT_H */
