/*
 * cloudstream/tool/ctl.c — cloudstream-ctl: what a cloudstream holds, asked of its admin port.
 *
 *   cloudstream-ctl [--admin ADDR:PORT] [--tsv] sessions [NODE]   connected edges
 *   cloudstream-ctl [--admin ADDR:PORT] [--tsv] streams [NODE]    requests in flight
 *   cloudstream-ctl [--admin ADDR:PORT] close NODE                close one node's tunnel
 *   cloudstream-ctl --admin ADDR:PORT [--tsv] tunnels             an edgestream's tunnels
 *
 * The admin port answers tab-separated lines with a header (GET /sessions, /streams; an
 * edgestream's admin port GET /tunnels and /streams, in the same shape); this
 * prints them as an aligned table, or as they came with --tsv. Exit 0, 1 when cloudstream
 * cannot be asked or says no, 2 for a usage error.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#define DEFAULT_ADMIN "127.0.0.1:10353"
#define MAX_BODY      (1u << 20)
#define MAX_COLS      16u

struct body {
	char *p;
	size_t len;
};

static size_t on_data(char *p, size_t size, size_t n, void *user)
{
	struct body *b = user;
	size_t add = size * n;
	if (b->len + add > MAX_BODY)
		return 0; /* over our bound: curl fails the transfer */
	char *grown = realloc(b->p, b->len + add + 1);
	if (grown == NULL)
		return 0;
	b->p = grown;
	memcpy(b->p + b->len, p, add);
	b->len += add;
	b->p[b->len] = '\0';
	return add;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: cloudstream-ctl [--admin ADDR:PORT] [--tsv] sessions [NODE]\n"
	           "       cloudstream-ctl [--admin ADDR:PORT] [--tsv] streams [NODE]\n"
	           "       cloudstream-ctl [--admin ADDR:PORT] close NODE\n"
	           "       cloudstream-ctl --admin ADDR:PORT [--tsv] tunnels\n"
	           "Asks cloudstream's admin port (--admin, default " DEFAULT_ADMIN
	           "); streams and tunnels\n"
	           "also an edgestream's (its admin port, 127.0.0.1:10354 by default).\n");
}

/* Prints tab-separated @text as columns padded to their widest cell; '#' lines as they are. */
static void print_table(char *text)
{
	size_t width[MAX_COLS] = {0};
	for (int pass = 0; pass < 2; pass++) {
		for (char *line = text; *line;) {
			char *eol = strchr(line, '\n');
			size_t llen = eol ? (size_t)(eol - line) : strlen(line);
			if (line[0] == '#') {
				if (pass == 1)
					printf("%.*s\n", (int)llen, line);
			} else {
				size_t col = 0;
				for (size_t i = 0; i <= llen && col < MAX_COLS;) {
					size_t j = i;
					while (j < llen && line[j] != '\t')
						j++;
					size_t w = j - i;
					if (pass == 0 && w > width[col])
						width[col] = w;
					if (pass == 1)
						printf("%s%-*.*s", col ? "  " : "",
						       j < llen ? (int)width[col] : 0, (int)w,
						       line + i);
					col++;
					i = j + 1;
				}
				if (pass == 1)
					printf("\n");
			}
			if (!eol)
				break;
			line = eol + 1;
		}
	}
}

int main(int argc, char **argv)
{
	const char *admin = DEFAULT_ADMIN;
	bool tsv = false;
	int i = 1;
	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		if (strcmp(argv[i], "--admin") == 0 && i + 1 < argc) {
			admin = argv[++i];
		} else if (strncmp(argv[i], "--admin=", 8) == 0) {
			admin = argv[i] + 8;
		} else if (strcmp(argv[i], "--tsv") == 0) {
			tsv = true;
		} else if (strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[i++];
	const char *node = i < argc ? argv[i++] : NULL;
	bool close_cmd = strcmp(cmd, "close") == 0;
	if (i < argc ||
	    (!close_cmd && strcmp(cmd, "sessions") != 0 && strcmp(cmd, "streams") != 0 &&
	     strcmp(cmd, "tunnels") != 0) ||
	    (close_cmd && node == NULL)) {
		usage(stderr);
		return 2;
	}
	/* Node names are DNS-1123: nothing in them needs escaping in a URL. */
	for (const char *c = node; c && *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' ||
		      *c == '.')) {
			fprintf(stderr, "cloudstream-ctl: \"%s\" is not a node name\n", node);
			return 2;
		}
	char url[512];
	int n = close_cmd ? snprintf(url, sizeof url, "http://%s/nodes/%s/close", admin, node)
	                  : snprintf(url, sizeof url, "http://%s/%s%s%s", admin, cmd,
	                             node ? "?node=" : "", node ? node : "");
	if (n < 0 || (size_t)n >= sizeof url) {
		fprintf(stderr, "cloudstream-ctl: --admin too long\n");
		return 2;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
		return 1;
	CURL *curl = curl_easy_init();
	struct body b = {0};
	char err[CURL_ERROR_SIZE] = "";
	long status = 0;
	CURLcode rc = CURLE_FAILED_INIT;
	if (curl) {
		curl_easy_setopt(curl, CURLOPT_URL, url);
		curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(curl, CURLOPT_WRITEDATA, &b);
		curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, err);
		curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
		curl_easy_setopt(curl, CURLOPT_NOPROXY, "*"); /* the admin port is local */
		curl_easy_setopt(curl, CURLOPT_USERAGENT, "cloudstream-ctl");
		if (close_cmd)
			curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "");
		rc = curl_easy_perform(curl);
		curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
		curl_easy_cleanup(curl);
	}
	curl_global_cleanup();
	int exit_code = 0;
	if (rc != CURLE_OK) {
		fprintf(stderr, "cloudstream-ctl: cannot ask cloudstream's admin port at %s: %s\n",
		        admin, err[0] ? err : curl_easy_strerror(rc));
		exit_code = 1;
	} else if (status != 200) {
		fprintf(stderr, "cloudstream-ctl: %ld: %s", status, b.p ? b.p : "\n");
		exit_code = 1;
	} else if (b.p) {
		if (tsv || close_cmd)
			fputs(b.p, stdout);
		else
			print_table(b.p);
	}
	free(b.p);
	return exit_code;
}
