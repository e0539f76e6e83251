/*
 * cloudstream/src/join.h — join tokens and signing requests, the pure half of bootstrap with
 * keys born on the node (join_srv.c is the glue).
 *
 * A join token is a kubeadm bootstrap token, "<id>.<secret>" with id [a-z0-9]{6} and secret
 * [a-z0-9]{16}. The id is public (it names the token in logs); the secret is not, and the token
 * file keeps only a hash of the whole token. The file (--join-tokens, written by
 * `stream-certs token`) is text, one token a line:
 *
 *     # comments and blank lines are ignored; so is anything after " #"
 *     token abcdef sha256:<64 hex of SHA-256("abcdef.<secret>")> expires=1764000000 uses=1
 *     token k3x9qa sha256:<...> expires=1764003600 uses=5 node=edge-17
 *
 * expires is unix seconds (required: every token has a bounded lifetime), uses how many
 * certificates it may obtain (1..1000000), node the only node it may join as (optional). A line
 * that is anything else, or an id given twice, makes the whole file invalid (the caller keeps
 * the list it had). No I/O, no clock, no logging: the daemon reads the file on a worker.
 */
#ifndef CLOUDSTREAM_JOIN_H
#define CLOUDSTREAM_JOIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <certs/certs.h>

#define CS_JOIN_TOKEN_ID_BYTES     6u
#define CS_JOIN_TOKEN_SECRET_BYTES 16u
#define CS_JOIN_TOKEN_BYTES        (CS_JOIN_TOKEN_ID_BYTES + 1u + CS_JOIN_TOKEN_SECRET_BYTES)
#define CS_JOIN_MAX_FILE_BYTES     (1u << 20)
#define CS_JOIN_MAX_TOKENS         10000u
#define CS_JOIN_MAX_USES           1000000u
#define CS_JOIN_NODE_MAX_BYTES     253u

struct cs_join_token {
	char id[CS_JOIN_TOKEN_ID_BYTES + 1];
	uint8_t hash[32];                      /* SHA-256 of the whole token text */
	int64_t expires;                       /* unix seconds */
	uint32_t uses;                         /* how many signings it allows */
	char node[CS_JOIN_NODE_MAX_BYTES + 1]; /* "" = any node */
};

struct cs_join_tokens {
	struct cs_join_token *v; /* sorted by id */
	size_t n;
};

/* Where a token file was refused: the 1-based line and a static reason. */
struct cs_join_error {
	size_t line;
	const char *why;
};

/*
 * cs_join_tokens_parse() - the tokens in @len bytes of @text (borrowed, not NUL-terminated).
 * Returns 0 with *@out (cs_join_tokens_free; an empty file gives no tokens), -EBADMSG with
 * *@err, -EMSGSIZE (over CS_JOIN_MAX_FILE_BYTES or CS_JOIN_MAX_TOKENS), -ENOMEM. Nothing is
 * allocated on failure.
 */
int cs_join_tokens_parse(const char *text, size_t len, struct cs_join_tokens **out,
                         struct cs_join_error *err);
void cs_join_tokens_free(struct cs_join_tokens *t);

/*
 * The uses taken so far, kept in a file of their own (--join-uses) so that a restart does not
 * make a used token good again: "use ID N" lines (N: signings taken), written whole by
 * cloudstream (cs_join_uses_format), read back at the first join after a start.
 */
struct cs_join_use {
	char id[CS_JOIN_TOKEN_ID_BYTES + 1];
	uint32_t used;
};

/* cs_join_uses_parse() - the uses in @len bytes of @text. 0 with *@out (free(); NULL and 0
 * for an empty file) and *@n, -EBADMSG with *@err, -EMSGSIZE, -ENOMEM. */
int cs_join_uses_parse(const char *text, size_t len, struct cs_join_use **out, size_t *n,
                       struct cs_join_error *err);

/* cs_join_uses_format() - @n uses as the file's text into @out (@cap bytes). Returns the
 * length (the text is complete only when it is below @cap). */
size_t cs_join_uses_format(const struct cs_join_use *u, size_t n, char *out, size_t cap);

/* cs_join_tokens_find() - the token with id @id (NUL-terminated), or NULL. */
const struct cs_join_token *cs_join_tokens_find(const struct cs_join_tokens *t, const char *id);

/*
 * cs_join_bearer() - the token of an Authorization header value @v (@len bytes): "Bearer "
 * (any case) and a token of the bootstrap format. Copies the id into @id (7 bytes) and the
 * whole token into @token (CS_JOIN_TOKEN_BYTES + 1). Returns 0 or -EBADMSG.
 */
int cs_join_bearer(const char *v, size_t len, char *id, char *token);

/* Why a join is refused; CS_JOIN_OK when it is not. */
enum cs_join_refusal {
	CS_JOIN_OK = 0,
	CS_JOIN_NO_TOKEN,     /* no bearer token of the bootstrap format */
	CS_JOIN_UNKNOWN,      /* no such token, or its secret is wrong */
	CS_JOIN_EXPIRED,      /* past its expiry */
	CS_JOIN_USED_UP,      /* every use taken: a reused token */
	CS_JOIN_FOREIGN_NODE, /* bound to another node */
	CS_JOIN_BAD_CSR,      /* not one valid signing request */
	CS_JOIN_CSR_NAME,     /* the request's subject names another node, or asks for more */
	CS_JOIN_DENIED,       /* the node is on the deny list */
	CS_JOIN_CERT,         /* renew: no verified certificate naming a node (or Node deleted) */
	CS_JOIN_CSR_DENIED,   /* --csr-signer-name: the cluster denied (or failed) the CSR */
	CS_JOIN_REFUSAL_COUNT
};

/* cs_join_refusal_name() - a metric label / log word ("reused", "expired", ...). */
const char *cs_join_refusal_name(enum cs_join_refusal r);

/*
 * cs_join_token_check() - may token @t (NULL: unknown), whose secret matched (@secret_ok), be
 * used now (@now, unix s) by node @node when @used of its uses are taken?
 */
enum cs_join_refusal cs_join_token_check(const struct cs_join_token *t, bool secret_ok, int64_t now,
                                         uint32_t used, const char *node);

/*
 * cs_join_csr_node() - the node a signing request asks a certificate for: CN
 * "system:node:<name>" with a valid node name, O exactly "system:nodes" (or none), no
 * extensions (a join never grants SANs: an IP SAN would be a verified node IP). Writes the name
 * to @node (@cap >= 254) and returns CS_JOIN_OK, or CS_JOIN_CSR_NAME with *@why (static).
 */
enum cs_join_refusal cs_join_csr_node(const struct certs_csr_info *info, char *node, size_t cap,
                                      const char **why);

#endif /* CLOUDSTREAM_JOIN_H */
