/*
 * cloudstream/src/hsgate.h — which new connections the tunnel port takes, and how many lines a
 * log flood may write (pure: no sockets, no clock, no lws).
 *
 * A TLS handshake costs ~45 KB of OpenSSL state from its first byte and CPU to finish; a
 * connection that never finishes keeps both until its deadline. The gate bounds them: at most
 * @max_inflight handshakes at once (the listener stops accepting while the gate is shut, so the
 * rest wait in the kernel's accept queue, costing us nothing), at most @max_per_source of them
 * from one address (one host cannot take every slot). Loop thread only.
 */
#ifndef CLOUDSTREAM_HSGATE_H
#define CLOUDSTREAM_HSGATE_H

#include <stdbool.h>
#include <stdint.h>

struct cs_hsgate_src {
	uint8_t addr[16]; /* IPv6, or IPv4-mapped */
	uint32_t n;       /* handshakes in flight from it; 0 = free entry */
};

struct cs_hsgate {
	uint32_t max_inflight, max_per_source;
	uint32_t inflight;           /* read-only */
	struct cs_hsgate_src *srcs;  /* max_inflight entries: a source in flight has one */
	uint64_t refused_per_source; /* read-only: connections closed for their source's share */
};

/* cs_hsgate_init() - both limits >= 1. Returns 0 or -ENOMEM / -EINVAL. */
int cs_hsgate_init(struct cs_hsgate *g, uint32_t max_inflight, uint32_t max_per_source);

void cs_hsgate_free(struct cs_hsgate *g);

/* cs_hsgate_open() - may the listener accept another connection now? */
bool cs_hsgate_open(const struct cs_hsgate *g);

/*
 * cs_hsgate_enter() - a connection from @addr starts its handshake. Returns its slot (>= 0) for
 * cs_hsgate_leave(), -EAGAIN when the gate is shut (the caller should not have accepted), or
 * -EUSERS when its source already has max_per_source in flight (close it; counted).
 */
int cs_hsgate_enter(struct cs_hsgate *g, const uint8_t addr[16]);

/* cs_hsgate_leave() - the handshake of @slot ended (finished or failed). */
void cs_hsgate_leave(struct cs_hsgate *g, int slot);

/*
 * A log budget: at most @per_window lines per @window_ms. cs_logbudget_take() returns true when
 * this line may be written; when a new window starts after lines were dropped, *@dropped says
 * how many (to be written as one line), else 0.
 */
struct cs_logbudget {
	uint64_t window_start_ms;
	uint32_t used, dropped;
};

bool cs_logbudget_take(struct cs_logbudget *b, uint64_t now_ms, uint32_t per_window,
                       uint64_t window_ms, uint32_t *dropped);

#endif /* CLOUDSTREAM_HSGATE_H */
