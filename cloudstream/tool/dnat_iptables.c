/*
 * cloudstream/tool/dnat_iptables.c — cloudstream-dnat-controller's rules (dnat_int.h): the
 * chain written with iptables-restore --noflush in one transaction (the rule text is
 * dnat_rules.c's, pure), the two jumps kept exactly ours, the host's own addresses left
 * alone, and the check that the chain and jumps are still as applied. iptables runs as a
 * child process (posix_spawn), its output bounded.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stream/log.h>

#include "dnat_int.h"

extern char **environ;

/* ---- iptables ---------------------------------------------------------------------------- */

/* Runs @argv with @in on its stdin; its stdout goes to *@out (owned by the caller, may be NULL).
 * Returns the exit status, or -errno. */
static int run(const char *const argv[], const char *in, char **out)
{
	int pin[2] = {-1, -1}, pout[2] = {-1, -1};
	if (out)
		*out = NULL;
	if (pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0)
		return -errno;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
	posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
	pid_t pid;
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pin[0]);
	close(pout[1]);
	if (rc != 0) {
		close(pin[1]);
		close(pout[0]);
		return -rc;
	}
	/* Feed stdin and drain stdout together: either may fill its pipe. */
	size_t in_len = in ? strlen(in) : 0, in_off = 0, cap = 0, len = 0;
	char *buf = NULL;
	if (in_len == 0) {
		close(pin[1]);
		pin[1] = -1;
	}
	int outfd = pout[0];
	while (outfd >= 0 || pin[1] >= 0) {
		struct pollfd p[2] = {{.fd = outfd, .events = POLLIN},
		                      {.fd = pin[1], .events = POLLOUT}};
		if (poll(p, 2, 10000) <= 0)
			break;
		if (pin[1] >= 0 && (p[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
			ssize_t n = write(pin[1], in + in_off, in_len - in_off);
			if (n > 0)
				in_off += (size_t)n;
			if (n <= 0 || in_off == in_len) {
				close(pin[1]);
				pin[1] = -1;
			}
		}
		if (outfd >= 0 && (p[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			if (cap - len < 65536 && cap < CMD_OUT_MAX) {
				char *g = realloc(buf, cap + 65536 + 1);
				if (g == NULL)
					break;
				buf = g;
				cap += 65536;
			}
			ssize_t n = cap > len ? read(outfd, buf + len, cap - len) : 0;
			if (n <= 0) {
				close(outfd);
				outfd = -1;
			} else {
				len += (size_t)n;
			}
		}
	}
	if (pin[1] >= 0)
		close(pin[1]);
	if (outfd >= 0)
		close(outfd);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (buf)
		buf[len] = '\0';
	if (out)
		*out = buf;
	else
		free(buf);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int nat_S(struct ctl *x, const char *chain, char **out)
{
	const char *argv[] = {x->ipt, "-w", "10", "-t", "nat", "-S", chain, NULL};
	return run(argv, NULL, out);
}

/* The host's own IPv4 addresses; true when they changed. */
bool cs__dnat_read_local(struct ctl *x)
{
	struct ifaddrs *ifa = NULL;
	char now[LOCAL_MAX][CS_DNAT_IP_TEXT_BYTES];
	size_t n = 0;
	if (getifaddrs(&ifa) == 0) {
		for (struct ifaddrs *i = ifa; i && n < LOCAL_MAX; i = i->ifa_next)
			if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
				inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr,
				          now[n++], CS_DNAT_IP_TEXT_BYTES);
		freeifaddrs(ifa);
	}
	bool changed = n != x->n_local || memcmp(now, x->local, n * sizeof now[0]) != 0;
	memcpy(x->local, now, n * sizeof now[0]);
	x->n_local = n;
	return changed;
}

/* The two jumps: exactly ours in each hook (older ones, e.g. the one-shot tool's with a
 * --dport, are replaced). 0, or -1 after logging. */
static int ensure_jumps(struct ctl *x)
{
	static const char *const hooks[] = {"OUTPUT", "PREROUTING"};
	for (size_t h = 0; h < 2; h++) {
		char *out = NULL;
		if (nat_S(x, hooks[h], &out) != 0) {
			free(out);
			st_err("%s -t nat -S %s failed", x->ipt, hooks[h]);
			return -1;
		}
		char want[256];
		snprintf(want, sizeof want, "-A %s " CS_DNAT_JUMP_ARGS, hooks[h]);
		bool have = false;
		for (char *l = out, *e; l && *l; l = e ? e + 1 : NULL) {
			e = strchr(l, '\n');
			if (e)
				*e = '\0';
			size_t ll = strlen(l);
			const char *suffix = " -j " CS_DNAT_CHAIN;
			size_t sl = strlen(suffix);
			if (ll < sl || strcmp(l + ll - sl, suffix) != 0)
				continue;
			if (strcmp(l, want) == 0 && !have) {
				have = true;
				continue;
			}
			/* Not ours (or a duplicate): delete it, word by word as -S printed it. */
			const char *argv[64];
			size_t a = 0;
			argv[a++] = x->ipt;
			argv[a++] = "-w";
			argv[a++] = "10";
			argv[a++] = "-t";
			argv[a++] = "nat";
			char *save = NULL;
			for (char *w = strtok_r(l, " ", &save); w && a < 63;
			     w = strtok_r(NULL, " ", &save))
				argv[a++] = strcmp(w, "-A") == 0 ? "-D" : w;
			argv[a] = NULL;
			run(argv, NULL, NULL);
		}
		free(out);
		if (!have) {
			const char *argv[] = {x->ipt,      "-w", "10",          "-t",
			                      "nat",       "-A", hooks[h],      "-p",
			                      "tcp",       "-m", "comment",     "--comment",
			                      CS_DNAT_TAG, "-j", CS_DNAT_CHAIN, NULL};
			if (run(argv, NULL, NULL) != 0) {
				st_err("%s: cannot add the jump in %s", x->ipt, hooks[h]);
				return -1;
			}
		}
	}
	return 0;
}

int cs__dnat_apply(struct ctl *x, const char *why)
{
	cs__dnat_read_local(x);
	char *rules = malloc(RULES_MAX_BYTES);
	if (rules == NULL)
		return -1;
	const char *local[LOCAL_MAX];
	for (size_t i = 0; i < x->n_local; i++)
		local[i] = x->local[i];
	ssize_t n = cs_dnat_rules(&x->nodes, x->to_ip, x->to_port, local, x->n_local, rules,
	                          RULES_MAX_BYTES);
	if (n < 0) {
		free(rules);
		st_err("the rule set is over %u bytes", RULES_MAX_BYTES);
		return -1;
	}
	const char *argv[] = {x->ipt_restore, "-w", "10", "--noflush", NULL};
	int rc = run(argv, rules, NULL);
	free(rules);
	if (rc != 0) {
		st_err("%s failed (%d): rules not applied", x->ipt_restore, rc);
		return -1;
	}
	if (ensure_jumps(x) < 0)
		return -1;
	free(x->applied);
	x->applied = NULL;
	nat_S(x, CS_DNAT_CHAIN, &x->applied);
	size_t rules_n = 0;
	for (size_t i = 0; i < x->nodes.n; i++)
		rules_n += x->nodes.v[i].n_ips;
	st_info("%s: %zu nodes, %zu addresses -> %s:%u (%s)", x->ipt, x->nodes.n, rules_n, x->to_ip,
	        (unsigned)x->to_port, why);
	x->dirty = false;
	return 0;
}

/* The chain and the jumps as applied? */
bool cs__dnat_in_place(struct ctl *x)
{
	char *now = NULL;
	bool same = nat_S(x, CS_DNAT_CHAIN, &now) == 0 && now && x->applied &&
	            strcmp(now, x->applied) == 0;
	free(now);
	if (!same)
		return false;
	static const char *const hooks[] = {"OUTPUT", "PREROUTING"};
	for (size_t h = 0; h < 2; h++) {
		char *out = NULL, want[256];
		snprintf(want, sizeof want, "-A %s " CS_DNAT_JUMP_ARGS "\n", hooks[h]);
		bool ok = nat_S(x, hooks[h], &out) == 0 && out && strstr(out, want);
		free(out);
		if (!ok)
			return false;
	}
	return true;
}
