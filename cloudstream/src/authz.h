/*
 * cloudstream/src/authz.h — the kubelet's authentication and authorization decisions, pure: the
 * request → SubjectAccessReview attributes mapping, the TokenReview and SubjectAccessReview
 * bodies we send and the parsing of the apiserver's answers, the users they carry, and the
 * decision cache. No I/O, clock or logging: the glue (authz_req.c) runs the apiserver calls on
 * the worker pool and passes the time in.
 *
 * What the kubelet does, and so we do (kubernetes pkg/kubelet/server/auth.go and server.go,
 * InstallAuthFilter; k8s.io/apiserver authenticatorfactory and the webhook authorizer):
 *  - a client certificate authenticates as user CN, groups its O values; a bearer token as the
 *    TokenReview's status.user; either way the group "system:authenticated" is added;
 *  - the verb is the HTTP method's: POST create, GET get, PUT update, PATCH patch, DELETE
 *    delete, anything else (HEAD too) the empty verb;
 *  - resource "nodes", name the node, API version v1, and the subresources tried in order:
 *    /stats → stats, /metrics → metrics, /logs → log, /checkpoint → checkpoint, everything
 *    else proxy; with KubeletFineGrainedAuthz (default on since 1.33) /pods and /runningpods/
 *    are tried as pods, /healthz as healthz, /configz as configz, /statusz as statusz, each
 *    then as proxy. The first allowed one admits the request.
 * The path is the request path percent-decoded (Go's URL.Path). One deliberate difference: a
 * path with a "." or ".." segment is mapped to proxy alone, so no dot-segment can make a path
 * look like /metrics to us and like something else to the edge's backend.
 */
#ifndef CLOUDSTREAM_AUTHZ_H
#define CLOUDSTREAM_AUTHZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CS_AUTHZ_MAX_SUBRESOURCES 2
#define CS_AUTHZ_MAX_NAME_BYTES   512   /* a user name kept for messages (longer: cut) */
#define CS_AUTHZ_MAX_USER_JSON    8192  /* the user's SAR fields, serialized */
#define CS_AUTHZ_MAX_TOKEN_BYTES  16384 /* a bearer token (longer: refused) */
#define CS_AUTHZ_MAX_ANSWER_BYTES 65536 /* a TokenReview or SAR answer from the apiserver */
#define CS_AUTHZ_MAX_REASON_BYTES 256
#define CS_AUTHZ_KEY_BYTES        32 /* cache keys are SHA-256 digests (made by the glue) */
#define CS_AUTHZ_AUTHENTICATED    "system:authenticated"

/* The SubjectAccessReview attributes of a request (every string static). */
struct cs_authz_attrs {
	const char *verb;                                   /* "get", ..., or "" */
	const char *subresource[CS_AUTHZ_MAX_SUBRESOURCES]; /* tried in this order */
	size_t n;                                           /* 1 or 2 */
};

/*
 * cs_authz_attrs_of() - the kubelet's attributes for @method and @path (the path part of the
 * request target, without the query; not decoded). Returns 0, or -EBADMSG when @path has a bad
 * percent-escape (Go refuses such a URL: 400).
 */
int cs_authz_attrs_of(const char *method, size_t method_len, const char *path, size_t path_len,
                      struct cs_authz_attrs *out);

/*
 * An authenticated user. @json holds the fields of a SubjectAccessReview spec that name it,
 * serialized without braces: "user":"...","groups":[...] and, when present, "uid" and "extra",
 * so the same user always gives the same bytes (it is part of the decision cache's key).
 */
struct cs_authz_user {
	char name[CS_AUTHZ_MAX_NAME_BYTES + 1]; /* for messages and logs */
	size_t json_len;
	char json[CS_AUTHZ_MAX_USER_JSON];
};

/*
 * cs_authz_user_from_cert() - the user of a client certificate: CN @cn, groups @orgs (@n of
 * them) and system:authenticated (x509 CommonNameUserConversion, then the group adder).
 * Returns 0, -EINVAL (empty CN), -EMSGSIZE (over CS_AUTHZ_MAX_USER_JSON), -ENOMEM.
 */
int cs_authz_user_from_cert(const char *cn, const char *const *orgs, size_t n,
                            struct cs_authz_user *out);

/*
 * cs_authz_bearer() - the token of an "Authorization: Bearer <token>" header value (@v, @len):
 * as the apiserver's bearertoken authenticator reads it (white space trimmed, the scheme in
 * any case, one space, the token up to the next space). Sets *@tok/@tok_len (a view into
 * @v). Returns 0,
 * -ENOENT (not a bearer credential, or empty), -EMSGSIZE (over CS_AUTHZ_MAX_TOKEN_BYTES).
 */
int cs_authz_bearer(const char *v, size_t len, const char **tok, size_t *tok_len);

/*
 * cs_authz_token_review_body() - the TokenReview we POST for @token, into @out (@cap bytes,
 * NUL-terminated). Returns its length, or -EMSGSIZE.
 */
ssize_t cs_authz_token_review_body(const char *token, size_t len, char *out, size_t cap);

/*
 * cs_authz_sar_body() - the SubjectAccessReview we POST for @user doing @verb on
 * nodes/@subresource named @node, into @out (NUL-terminated). Returns its length, or -EMSGSIZE.
 */
ssize_t cs_authz_sar_body(const struct cs_authz_user *user, const char *verb,
                          const char *subresource, const char *node, char *out, size_t cap);

/*
 * cs_authz_parse_token_review() - the apiserver's answer to a TokenReview (@body, @len, status
 * 200 or 201). On status.authenticated true with a user name, fills @out (the user's groups
 * plus system:authenticated) and sets *@authenticated. Otherwise *@authenticated is false and
 * @reason gets status.error when there is one. Returns 0, -EBADMSG (not a TokenReview: not
 * JSON, wrong kind or types, authenticated without a user name), -EMSGSIZE (over the limits),
 * -ENOMEM.
 */
int cs_authz_parse_token_review(const char *body, size_t len, bool *authenticated,
                                struct cs_authz_user *out, char *reason, size_t reason_cap);

enum cs_authz_verdict {
	CS_AUTHZ_NO_OPINION = 0, /* neither allowed nor denied: not allowed */
	CS_AUTHZ_ALLOW,
	CS_AUTHZ_DENY,
};

/*
 * cs_authz_parse_sar() - the apiserver's answer to a SubjectAccessReview: status.allowed →
 * ALLOW, status.denied → DENY, neither → NO_OPINION (the webhook authorizer's reading).
 * @reason gets status.reason (or evaluationError). Returns 0, -EBADMSG, -ENOMEM.
 */
int cs_authz_parse_sar(const char *body, size_t len, enum cs_authz_verdict *out, char *reason,
                       size_t reason_cap);

/*
 * cs_authz_forbidden_message() - the kubelet's 403 text for @user, @a:
 * "Forbidden (user=U, verb=V, resource=nodes, subresource(s)=[S1 S2])". Returns its length
 * (cut to @cap - 1).
 */
size_t cs_authz_forbidden_message(const char *user, const struct cs_authz_attrs *a, char *out,
                                  size_t cap);

/* ---- the decision cache ------------------------------------------------------------------- */

/*
 * Answers of the apiserver by key (a digest the glue makes of the token, or of the user and the
 * attributes), each with its expiry; and the calls in flight, so that requests asking the same
 * question wait for one answer instead of asking again. Bounded: a full probe window evicts the
 * answer closest to expiry (never a call in flight). Loop thread only (the caller's).
 */
struct cs_authz_cache;

enum cs_authz_cache_hit {
	CS_AUTHZ_MISS = 0, /* not known (or expired) */
	CS_AUTHZ_HIT,      /* *ok (and *user) are the answer */
	CS_AUTHZ_PENDING,  /* a call is in flight: *job names it */
};

/* cs_authz_cache_new() - a cache of @capacity entries (a power of two ≥ 8 is used). */
int cs_authz_cache_new(struct cs_authz_cache **out, size_t capacity);
void cs_authz_cache_free(struct cs_authz_cache *c);

/*
 * cs_authz_cache_get() - the entry for @key at @now_ms. On HIT, *@ok is the cached answer
 * (authenticated, or allowed) and *@user (when @user is not NULL) the cached user or NULL,
 * valid until the next put or pending call. On PENDING, *@job is the call in flight.
 */
enum cs_authz_cache_hit cs_authz_cache_get(const struct cs_authz_cache *c,
                                           const uint8_t key[CS_AUTHZ_KEY_BYTES], uint64_t now_ms,
                                           bool *ok, const struct cs_authz_user **user,
                                           uint64_t *job);

/* cs_authz_cache_pending() - a call @job (non-zero) is in flight for @key. Returns 0, or
 * -ENOSPC when every slot of its probe window is in flight (the call is then not shared). */
int cs_authz_cache_pending(struct cs_authz_cache *c, const uint8_t key[CS_AUTHZ_KEY_BYTES],
                           uint64_t job);

/*
 * cs_authz_cache_put() - the answer for @key: @ok, @user (copied; may be NULL), until
 * @expires_ms (0: not cached, only the call in flight is forgotten). Returns 0, -ENOMEM (the
 * entry is then dropped), -ENOSPC (no slot: not cached).
 */
int cs_authz_cache_put(struct cs_authz_cache *c, const uint8_t key[CS_AUTHZ_KEY_BYTES], bool ok,
                       const struct cs_authz_user *user, uint64_t expires_ms);

#endif /* CLOUDSTREAM_AUTHZ_H */
