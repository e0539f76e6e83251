/*
 * stream-certs: create CAs and certificates for cloudstream/edgestream with the OpenSSL API.
 * A thin command line over certs/certs.h; see certs/README.md.
 */
#include <certs/certs.h>

#include <errno.h>
#include <getopt.h>
#include <openssl/evp.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tool.h"

#define MAX_LIST 32

const char certs_tool_usage[] =
        "usage: stream-certs <command> [options]\n"
        "\n"
        "commands:\n"
        "  ca      --out DIR/NAME [--cn CN] [--key ec|rsa] [--rsa-bits N] [--days N] [--force]\n"
        "          a self-signed CA: writes NAME.crt (0644) and NAME.key (0600)\n"
        "  server  --ca DIR/CA --out DIR/NAME --cn CN [--dns a,b] [--ip 1.2.3.4,::1] [--client]\n"
        "          [--days N] [--key ec|rsa] [--rsa-bits N] [--force]\n"
        "          a server certificate (serverAuth; --client adds clientAuth) signed by CA\n"
        "  client  --ca DIR/CA --out DIR/NAME (--node NODE | --cn CN [--org O]...) [--ip a,b]\n"
        "          [--dns a,b] [--days N] [--key ec|rsa] [--rsa-bits N] [--force]\n"
        "          a client certificate; --node gives CN=system:node:NODE, O=system:nodes;\n"
        "          --ip puts the node's addresses in it (cloudstream routes them to the node)\n"
        "  show    FILE.crt\n"
        "          subject, issuer, serial, validity, SANs, usages, key type\n"
        "  verify  --ca CA.crt FILE.crt [--name DNS-or-IP] [--purpose server|client]\n"
        "          exit 0 when FILE chains to CA, is valid now, allows the purpose and names NAME\n"
        "  quick   --out DIR [--node NAME]... [--dns a,b] [--ip a,b] [--days N] [--force]\n"
        "          every CA and certificate the tunnel needs (see certs/README.md for the list)\n"
        "  token   --file FILE [--ttl 24h] [--uses 1] [--node NODE]\n"
        "          a join token ([a-z0-9]{6}.[a-z0-9]{16}, printed once) added to cloudstream's\n"
        "          --join-tokens FILE (0600; only its hash is kept); --ttl 1s..365d\n"
        "  ca-hash CA.crt\n"
        "          the CA's pin for edgestream --cloud-ca-hash: sha256:<hex of its public key>\n"
        "\n"
        "DIR/NAME writes DIR/NAME.crt and DIR/NAME.key. Existing files are kept unless --force.\n"
        "Exit status: 0 success, 1 failure, 2 usage error.\n";

static void usage(FILE *f)
{
	fputs(certs_tool_usage, f);
}

/* Options shared by all commands; each command uses what it needs. */
struct opts {
	const char *out, *ca, *cn, *node, *name, *purpose;
	const char *orgs[MAX_LIST];
	size_t num_orgs;
	char *dns_buf, *ip_buf;
	const char *dns[MAX_LIST], *ips[MAX_LIST];
	size_t num_dns, num_ips;
	const char *nodes[MAX_LIST];
	size_t num_nodes;
	struct certs_key_opts key;
	int days;
	bool force, client_too;
	int argc;
	char **argv; /* positional arguments */
};

/* Splits a comma-separated list in place. */
static int split_list(char *s, const char **out, size_t *n)
{
	for (char *save = NULL, *tok = strtok_r(s, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (*n == MAX_LIST)
			return -EMSGSIZE;
		out[(*n)++] = tok;
	}
	return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -EINVAL;
	*out = (int)v;
	return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
	        {"out", required_argument, 0, 'o'},  {"ca", required_argument, 0, 'a'},
	        {"cn", required_argument, 0, 'c'},   {"org", required_argument, 0, 'g'},
	        {"dns", required_argument, 0, 'd'},  {"ip", required_argument, 0, 'i'},
	        {"node", required_argument, 0, 'n'}, {"days", required_argument, 0, 'D'},
	        {"key", required_argument, 0, 'k'},  {"rsa-bits", required_argument, 0, 'b'},
	        {"name", required_argument, 0, 'N'}, {"purpose", required_argument, 0, 'p'},
	        {"force", no_argument, 0, 'f'},      {"client", no_argument, 0, 'C'},
	        {"help", no_argument, 0, 'h'},       {0, 0, 0, 0},
	};
	o->days = 0;
	optind = 1;
	int c, bits;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'o':
			o->out = optarg;
			break;
		case 'a':
			o->ca = optarg;
			break;
		case 'c':
			o->cn = optarg;
			break;
		case 'g':
			if (o->num_orgs == MAX_LIST)
				return -EMSGSIZE;
			o->orgs[o->num_orgs++] = optarg;
			break;
		case 'd':
			if (split_list(optarg, o->dns, &o->num_dns) < 0)
				return -EMSGSIZE;
			break;
		case 'i':
			if (split_list(optarg, o->ips, &o->num_ips) < 0)
				return -EMSGSIZE;
			break;
		case 'n':
			if (o->num_nodes == MAX_LIST)
				return -EMSGSIZE;
			o->nodes[o->num_nodes++] = optarg;
			o->node = optarg;
			break;
		case 'D':
			if (parse_int(optarg, 0, 36500, &o->days) < 0) {
				fprintf(stderr, "stream-certs: --days: 0..36500\n");
				return -EINVAL;
			}
			break;
		case 'k':
			if (strcmp(optarg, "ec") == 0)
				o->key.type = CERTS_KEY_EC_P256;
			else if (strcmp(optarg, "rsa") == 0)
				o->key.type = CERTS_KEY_RSA;
			else {
				fprintf(stderr, "stream-certs: --key: ec or rsa\n");
				return -EINVAL;
			}
			break;
		case 'b':
			if (parse_int(optarg, 2048, 4096, &bits) < 0) {
				fprintf(stderr, "stream-certs: --rsa-bits: 2048, 3072 or 4096\n");
				return -EINVAL;
			}
			o->key.rsa_bits = (unsigned)bits;
			break;
		case 'N':
			o->name = optarg;
			break;
		case 'p':
			o->purpose = optarg;
			break;
		case 'f':
			o->force = true;
			break;
		case 'C':
			o->client_too = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			return -EINVAL;
		}
	}
	o->argc = argc - optind;
	o->argv = argv + optind;
	return 0;
}

/* "DIR/NAME" -> "DIR/NAME.crt" and "DIR/NAME.key". */
static int pair_paths(const char *base, char *crt, char *key, size_t cap)
{
	int a = snprintf(crt, cap, "%s.crt", base), b = snprintf(key, cap, "%s.key", base);
	return (a < 0 || (size_t)a >= cap || b < 0 || (size_t)b >= cap) ? -ENAMETOOLONG : 0;
}

static int fail(const char *what, int rc, const char *err)
{
	fprintf(stderr, "stream-certs: %s: %s\n", what, err && *err ? err : strerror(-rc));
	return 1;
}

static int cmd_ca(struct opts *o)
{
	if (o->out == NULL) {
		fprintf(stderr, "stream-certs ca: --out DIR/NAME is required\n");
		return EXIT_USAGE;
	}
	char crt[4096], key[4096], err[1024] = "";
	if (pair_paths(o->out, crt, key, sizeof crt) < 0)
		return fail("ca", -ENAMETOOLONG, NULL);
	int rc = certs_create_ca(
	        crt, key, o->cn ? o->cn : "cloudstream CA", &o->key, o->days ? o->days : 3650,
	        o->force ? CERTS_WRITE_OVERWRITE : CERTS_WRITE_NEW, err, sizeof err);
	if (rc < 0)
		return fail("ca", rc, err);
	printf("wrote %s %s\n", crt, key);
	return 0;
}

static int issue(struct opts *o, const char *ca_base, const char *out_base,
                 const struct certs_leaf_opts *leaf)
{
	char ca_crt[4096], ca_key[4096], crt[4096], key[4096], err[1024] = "";
	if (pair_paths(ca_base, ca_crt, ca_key, sizeof crt) < 0 ||
	    pair_paths(out_base, crt, key, sizeof crt) < 0)
		return fail("issue", -ENAMETOOLONG, NULL);
	int rc = certs_issue(ca_crt, ca_key, crt, key, leaf,
	                     o->force ? CERTS_WRITE_OVERWRITE : CERTS_WRITE_NEW, err, sizeof err);
	if (rc < 0)
		return fail(out_base, rc, err);
	printf("wrote %s %s\n", crt, key);
	return 0;
}

/* A leaf certificate as the options ask: key, CN, organizations, SANs, @usage, 365 days unless
 * --days. */
static struct certs_leaf_opts leaf_from_opts(const struct opts *o, unsigned usage)
{
	return (struct certs_leaf_opts){
	        .key = o->key,
	        .cn = o->cn,
	        .orgs = o->orgs,
	        .num_orgs = o->num_orgs,
	        .dns = o->dns,
	        .num_dns = o->num_dns,
	        .ips = o->ips,
	        .num_ips = o->num_ips,
	        .usage = usage,
	        .days = o->days ? o->days : 365,
	};
}

static int cmd_server(struct opts *o)
{
	if (o->ca == NULL || o->out == NULL || o->cn == NULL) {
		fprintf(stderr, "stream-certs server: --ca, --out and --cn are required\n");
		return EXIT_USAGE;
	}
	struct certs_leaf_opts leaf =
	        leaf_from_opts(o, CERTS_USAGE_SERVER | (o->client_too ? CERTS_USAGE_CLIENT : 0u));
	return issue(o, o->ca, o->out, &leaf);
}

static int cmd_client(struct opts *o)
{
	if (o->ca == NULL || o->out == NULL || (o->node == NULL) == (o->cn == NULL)) {
		fprintf(stderr, "stream-certs client: --ca, --out and one of --node or --cn are "
		                "required\n");
		return EXIT_USAGE;
	}
	char cn[300];
	static const char *const node_orgs[] = {"system:nodes"};
	struct certs_leaf_opts leaf = leaf_from_opts(o, CERTS_USAGE_CLIENT);
	if (o->node) {
		if (!certs_valid_node_name(o->node, strlen(o->node))) {
			fprintf(stderr,
			        "stream-certs client: '%s' is not a valid node name "
			        "(lower-case DNS-1123 subdomain)\n",
			        o->node);
			return EXIT_USAGE;
		}
		snprintf(cn, sizeof cn, "system:node:%s", o->node);
		leaf.cn = cn;
		leaf.orgs = node_orgs;
		leaf.num_orgs = 1;
	}
	return issue(o, o->ca, o->out, &leaf);
}

static void print_time(const char *label, const ASN1_TIME *t)
{
	BIO *b = BIO_new_fp(stdout, BIO_NOCLOSE);
	printf("%s", label);
	ASN1_TIME_print(b, t);
	printf("\n");
	BIO_free(b);
}

static int cmd_show(struct opts *o)
{
	if (o->argc != 1) {
		fprintf(stderr, "stream-certs show: one certificate file\n");
		return EXIT_USAGE;
	}
	X509 *x;
	char err[1024] = "";
	int rc = certs_load(o->argv[0], &x, err, sizeof err);
	if (rc < 0)
		return fail("show", rc, err);
	struct certs_identity id;
	rc = certs_x509_identity(x, &id);
	char line[1024];
	X509_NAME_oneline(X509_get_subject_name(x), line, sizeof line);
	printf("subject:   %s\n", line);
	X509_NAME_oneline(X509_get_issuer_name(x), line, sizeof line);
	printf("issuer:    %s\n", line);
	BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
	char *hex = bn ? BN_bn2hex(bn) : NULL;
	printf("serial:    %s\n", hex ? hex : "?");
	OPENSSL_free(hex);
	BN_free(bn);
	print_time("notBefore: ", X509_get0_notBefore(x));
	print_time("notAfter:  ", X509_get0_notAfter(x));
	if (rc == 0) {
		for (size_t i = 0; i < id.num_dns; i++)
			printf("DNS:       %s\n", id.dns[i]);
		for (size_t i = 0; i < id.num_ips; i++)
			printf("IP:        %s\n", id.ips[i]);
	}
	uint32_t xku = X509_get_extended_key_usage(x);
	printf("CA:        %s\n", X509_check_ca(x) ? "yes" : "no");
	printf("usage:     %s%s\n", (xku & XKU_SSL_SERVER) ? "server " : "",
	       (xku & XKU_SSL_CLIENT) ? "client" : "");
	EVP_PKEY *pk = X509_get0_pubkey(x);
	printf("key:       %s %d bits\n", pk ? EVP_PKEY_get0_type_name(pk) : "?",
	       pk ? EVP_PKEY_get_bits(pk) : 0);
	char node[256];
	if (rc == 0 && certs_node_name_from_cn(id.cn, CERTS_CN_NODE, node, sizeof node) == 0)
		printf("node:      %s\n", node);
	X509_free(x);
	return 0;
}

static int cmd_verify(struct opts *o)
{
	if (o->ca == NULL || o->argc != 1) {
		fprintf(stderr, "stream-certs verify: --ca CA.crt and one certificate file\n");
		return EXIT_USAGE;
	}
	unsigned usage = 0;
	if (o->purpose && strcmp(o->purpose, "server") == 0)
		usage = CERTS_USAGE_SERVER;
	else if (o->purpose && strcmp(o->purpose, "client") == 0)
		usage = CERTS_USAGE_CLIENT;
	else if (o->purpose) {
		fprintf(stderr, "stream-certs verify: --purpose server or client\n");
		return EXIT_USAGE;
	}
	char err[1024] = "";
	int rc = certs_verify(o->ca, o->argv[0], usage, o->name, err, sizeof err);
	if (rc < 0)
		return fail("verify", rc, err);
	printf("%s: OK\n", o->argv[0]);
	return 0;
}

/* quick: the whole set, one CA per trust domain. */
static int cmd_quick(struct opts *o)
{
	if (o->out == NULL) {
		fprintf(stderr, "stream-certs quick: --out DIR is required\n");
		return EXIT_USAGE;
	}
	if (mkdir(o->out, 0755) != 0 && errno != EEXIST)
		return fail(o->out, -errno, NULL);
	static const char *const default_dns[] = {"localhost"};
	static const char *const default_ips[] = {"127.0.0.1", "::1"};
	const char *const *dns = o->num_dns ? o->dns : default_dns;
	size_t num_dns = o->num_dns ? o->num_dns : 1;
	const char *const *ips = o->num_ips ? o->ips : default_ips;
	size_t num_ips = o->num_ips ? o->num_ips : 2;
	int days = o->days ? o->days : 365;
	char a[4096], b[4096];
	struct {
		const char *name, *cn;
	} cas[] = {
	        {"tunnel-ca", "cloudstream tunnel CA"},
	        {"stream-ca", "cloudstream stream-server CA"},
	        {"kubelet-ca", "edge kubelet CA"},
	        {"peer-ca", "cloudstream peer CA"},
	};
	for (size_t i = 0; i < sizeof cas / sizeof cas[0]; i++) {
		snprintf(a, sizeof a, "%s/%s", o->out, cas[i].name);
		struct opts ca = *o;
		ca.out = a;
		ca.cn = cas[i].cn;
		ca.days = days > 3650 ? days : 3650;
		ca.key.type = CERTS_KEY_EC_P256;
		int rc = cmd_ca(&ca);
		if (rc)
			return rc;
	}
	static const char *const masters[] = {"system:masters"};
	const struct {
		const char *ca, *out, *cn;
		const char *const *orgs;
		size_t num_orgs;
		unsigned usage;
		bool sans;
	} leaves[] = {
	        {"tunnel-ca", "cloudstream-tunnel", "cloudstream", NULL, 0, CERTS_USAGE_SERVER,
	         true},
	        {"stream-ca", "cloudstream-stream", "cloudstream", NULL, 0, CERTS_USAGE_SERVER,
	         true},
	        {"stream-ca", "apiserver-kubelet-client", "kube-apiserver-kubelet-client", masters,
	         1, CERTS_USAGE_CLIENT, false},
	        {"kubelet-ca", "kubelet", "kubelet", NULL, 0, CERTS_USAGE_SERVER, true},
	        {"kubelet-ca", "edgestream-kubelet-client", "edgestream", NULL, 0,
	         CERTS_USAGE_CLIENT, false},
	        /* what each cloudstream replica presents to the others (--peer-cert) */
	        {"peer-ca", "cloudstream-peer", "cloudstream-peer", NULL, 0, CERTS_USAGE_CLIENT,
	         false},
	};
	for (size_t i = 0; i < sizeof leaves / sizeof leaves[0]; i++) {
		snprintf(a, sizeof a, "%s/%s", o->out, leaves[i].ca);
		snprintf(b, sizeof b, "%s/%s", o->out, leaves[i].out);
		struct certs_leaf_opts leaf = {
		        .cn = leaves[i].cn,
		        .orgs = leaves[i].orgs,
		        .num_orgs = leaves[i].num_orgs,
		        .dns = leaves[i].sans ? dns : NULL,
		        .num_dns = leaves[i].sans ? num_dns : 0,
		        .ips = leaves[i].sans ? ips : NULL,
		        .num_ips = leaves[i].sans ? num_ips : 0,
		        .usage = leaves[i].usage,
		        .days = days,
		};
		int rc = issue(o, a, b, &leaf);
		if (rc)
			return rc;
	}
	static const char *const default_node[] = {"edge-1"};
	const char *const *nodes = o->num_nodes ? o->nodes : default_node;
	size_t num_nodes = o->num_nodes ? o->num_nodes : 1;
	for (size_t i = 0; i < num_nodes; i++) {
		snprintf(b, sizeof b, "%s/node-%s", o->out, nodes[i]);
		snprintf(a, sizeof a, "%s/tunnel-ca", o->out);
		struct opts c = *o;
		c.ca = a;
		c.out = b;
		c.node = nodes[i];
		c.cn = NULL;
		c.num_orgs = 0;
		c.days = days;
		int rc = cmd_client(&c);
		if (rc)
			return rc;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : 0;
	}
	struct opts o = {0};
	const char *cmd = argv[1];
	if (strcmp(cmd, "token") == 0)
		return certs_tool_token(argc - 1, argv + 1);
	if (strcmp(cmd, "ca-hash") == 0)
		return certs_tool_ca_hash(argc - 1, argv + 1);
	if (parse_opts(argc - 1, argv + 1, &o) < 0) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(cmd, "ca") == 0)
		return cmd_ca(&o);
	if (strcmp(cmd, "server") == 0)
		return cmd_server(&o);
	if (strcmp(cmd, "client") == 0)
		return cmd_client(&o);
	if (strcmp(cmd, "show") == 0)
		return cmd_show(&o);
	if (strcmp(cmd, "verify") == 0)
		return cmd_verify(&o);
	if (strcmp(cmd, "quick") == 0)
		return cmd_quick(&o);
	fprintf(stderr, "stream-certs: unknown command '%s'\n\n", cmd);
	usage(stderr);
	return EXIT_USAGE;
}
