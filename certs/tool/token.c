/*
 * stream-certs token / ca-hash: join tokens for edges whose keys are born on the node, and the
 * CA pin they check the cloud against (certs/README.md, "Bootstrap").
 *
 * A token is a kubeadm bootstrap token, "<id>.<secret>" ([a-z0-9]{6}.[a-z0-9]{16}), printed
 * once on stdout; the token file keeps only its id and the SHA-256 of the whole token, with its
 * expiry, its use count and optionally the node it is for (cloudstream/src/join.h). The file is
 * rewritten atomically with mode 0600.
 */
#include <certs/certs.h>

#include <errno.h>
#include <getopt.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tool.h"

#define TOKEN_FILE_MAX (1u << 20)
#define MAX_TTL_S      (365L * 86400L)

static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";

/* @n random characters of [a-z0-9], without modulo bias. */
static int random_chars(char *out, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned char b[32];
		if (RAND_bytes(b, sizeof b) != 1)
			return -EIO;
		for (size_t k = 0; k < sizeof b && i < n; k++)
			if (b[k] < 252) /* 252 = 7 * 36 */
				out[i++] = alphabet[b[k] % 36];
	}
	return 0;
}

/* "90s", "15m", "24h", "7d" or seconds. */
static int parse_ttl(const char *s, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || v < 1)
		return -EINVAL;
	long mul = 1;
	if (strcmp(end, "s") == 0 || *end == '\0')
		mul = 1;
	else if (strcmp(end, "m") == 0)
		mul = 60;
	else if (strcmp(end, "h") == 0)
		mul = 3600;
	else if (strcmp(end, "d") == 0)
		mul = 86400;
	else
		return -EINVAL;
	if (v > MAX_TTL_S / mul)
		return -EINVAL;
	*out = v * mul;
	return 0;
}

static int read_existing(const char *path, char **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return errno == ENOENT ? 0 : -errno;
	char *buf = malloc(TOKEN_FILE_MAX + 1);
	size_t n = buf ? fread(buf, 1, TOKEN_FILE_MAX + 1, f) : 0;
	int rc = buf == NULL ? -ENOMEM : ferror(f) ? -EIO : n > TOKEN_FILE_MAX ? -EMSGSIZE : 0;
	fclose(f);
	if (rc < 0) {
		free(buf);
		return rc;
	}
	*out = buf;
	*len = n;
	return 0;
}

int certs_tool_token(int argc, char **argv)
{
	static const struct option longopts[] = {
	        {"file", required_argument, 0, 'f'}, {"ttl", required_argument, 0, 't'},
	        {"uses", required_argument, 0, 'u'}, {"node", required_argument, 0, 'n'},
	        {"help", no_argument, 0, 'h'},       {0, 0, 0, 0},
	};
	const char *file = NULL, *node = NULL;
	long ttl = 86400, uses = 1;
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		char *end;
		switch (c) {
		case 'f':
			file = optarg;
			break;
		case 't':
			if (parse_ttl(optarg, &ttl) < 0) {
				fprintf(stderr, "stream-certs token: --ttl: 1s..365d (90s, 15m, "
				                "24h, 7d)\n");
				return EXIT_USAGE;
			}
			break;
		case 'u':
			errno = 0;
			uses = strtol(optarg, &end, 10);
			if (errno || end == optarg || *end || uses < 1 || uses > 1000000) {
				fprintf(stderr, "stream-certs token: --uses: 1..1000000\n");
				return EXIT_USAGE;
			}
			break;
		case 'n':
			if (!certs_valid_node_name(optarg, strlen(optarg))) {
				fprintf(stderr, "stream-certs token: --node: not a node name\n");
				return EXIT_USAGE;
			}
			node = optarg;
			break;
		case 'h':
			fputs(certs_tool_usage, stdout);
			return 0;
		default:
			return EXIT_USAGE;
		}
	}
	if (file == NULL || optind != argc) {
		fprintf(stderr, "stream-certs token: --file FILE is required (and nothing else)\n");
		return EXIT_USAGE;
	}
	char token[6 + 1 + 16 + 1];
	if (random_chars(token, 6) < 0 || random_chars(token + 7, 16) < 0) {
		fprintf(stderr, "stream-certs token: no randomness\n");
		return 1;
	}
	token[6] = '.';
	token[23] = '\0';
	unsigned char md[32];
	unsigned mdlen = 0;
	if (EVP_Digest(token, 23, md, &mdlen, EVP_sha256(), NULL) != 1) {
		fprintf(stderr, "stream-certs token: SHA-256 failed\n");
		return 1;
	}
	char line[512];
	int n = snprintf(line, sizeof line, "token %.6s sha256:", token);
	for (size_t i = 0; i < 32; i++)
		n += snprintf(line + n, sizeof line - (size_t)n, "%02x", md[i]);
	long long expires = (long long)time(NULL) + ttl;
	n += snprintf(line + n, sizeof line - (size_t)n, " expires=%lld uses=%ld%s%s\n", expires,
	              uses, node ? " node=" : "", node ? node : "");
	char *old;
	size_t old_len;
	int rc = read_existing(file, &old, &old_len);
	if (rc < 0) {
		fprintf(stderr, "stream-certs token: %s: %s\n", file, strerror(-rc));
		return 1;
	}
	size_t total = old_len + (old_len && old[old_len - 1] != '\n') + (size_t)n;
	char *all = malloc(total + 1);
	if (all == NULL) {
		free(old);
		return 1;
	}
	size_t off = 0;
	if (old_len) {
		memcpy(all, old, old_len);
		off = old_len;
		if (old[old_len - 1] != '\n')
			all[off++] = '\n';
	}
	memcpy(all + off, line, (size_t)n);
	rc = certs_write_file(file, all, total, 0600);
	free(old);
	free(all);
	if (rc < 0) {
		fprintf(stderr, "stream-certs token: writing %s: %s\n", file, strerror(-rc));
		return 1;
	}
	printf("%s\n", token);
	return 0;
}

int certs_tool_ca_hash(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "stream-certs ca-hash: one CA certificate file\n");
		return EXIT_USAGE;
	}
	X509 *x;
	char err[512] = "", pin[CERTS_PIN_TEXT_BYTES];
	int rc = certs_load(argv[1], &x, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "stream-certs ca-hash: %s\n", err);
		return 1;
	}
	rc = certs_spki_pin(x, pin, sizeof pin);
	X509_free(x);
	if (rc < 0) {
		fprintf(stderr, "stream-certs ca-hash: %s\n", strerror(-rc));
		return 1;
	}
	printf("%s\n", pin);
	return 0;
}
