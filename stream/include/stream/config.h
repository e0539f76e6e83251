/*
 * stream/config.h — table-driven configuration for the daemons: one table of options gives the
 * defaults, the config file (--config), the command-line flags, --help and the FLAGS.md
 * document, so the documentation cannot drift from the code.
 *
 * Every option is a flag (--name VALUE or --name=VALUE) and a key of the config file with the
 * same name. Flags override the file whatever their order. Unknown keys and flags are errors (a
 * typo must not silently run with a default). Values are bounded: strings and lists by
 * ST_CONFIG_MAX_VALUE_BYTES / ST_CONFIG_MAX_LIST, the file by ST_CONFIG_MAX_FILE_BYTES.
 *
 * The file is YAML or JSON (st_config_parse tells them apart by the first character that is not
 * white space: '{' is JSON). A YAML file is one flat mapping that names what it is:
 *
 *     apiVersion: cloudstream.io/v1alpha1     # ST_CONFIG_API_VERSION
 *     kind: CloudStreamConfig                 # the spec's kind
 *     tunnel-listen: 0.0.0.0:10004
 *     stream-allowed-subjects: [kube-apiserver-kubelet-client]
 *
 * Both keys are required in YAML. JSON files written before there was a version stay valid: in
 * JSON the two keys are optional, and when present they must be right. Either way a key given
 * twice, an unknown key, a nested mapping and YAML anchors, aliases and tags are refused with
 * the file, the line and the key named.
 *
 * Parsing (st_config_set, st_config_parse*, st_config_diff) is pure; st_config_load reads the
 * file and argv. Main thread, at start-up and on SIGHUP.
 */
#ifndef STREAM_CONFIG_H
#define STREAM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <stream/limits.h>

#define ST_CONFIG_MAX_FILE_BYTES  (1u << 20)
#define ST_CONFIG_MAX_VALUE_BYTES 4096u
#define ST_CONFIG_MAX_LIST        64u

enum st_opt_type {
	ST_OPT_STRING,      /* char * (owned; NULL when unset) */
	ST_OPT_U64,         /* uint64_t, decimal, in [min, max] */
	ST_OPT_BOOL,        /* bool: true/false (a bare --flag means true) */
	ST_OPT_ENUM,        /* int: index into enum_names */
	ST_OPT_DURATION_MS, /* uint64_t ms: 250ms, 5s, 2m, 1h, or a bare number of ms */
	ST_OPT_BYTES,       /* uint64_t: 65536, 64KiB, 1MiB, 1GiB (binary units only) */
	ST_OPT_STRING_LIST, /* struct st_strlist (owned): JSON array, or repeated/comma flags */
};

/* A list of owned strings. */
struct st_strlist {
	char **v;
	size_t n;
};

#define ST_OPT_F_SECRET 1u /* never printed (tokens); file paths are not secrets */
#define ST_OPT_F_RELOAD 2u /* what it names is re-read on SIGHUP */
#define ST_OPT_F_LIVE   4u /* a new value in the file is applied on SIGHUP (else: restart) */

/* The apiVersion of both daemons' config files (the kind tells them apart). */
#define ST_CONFIG_API_VERSION "cloudstream.io/v1alpha1"

struct st_opt {
	const char *name; /* flag and JSON key, kebab-case */
	enum st_opt_type type;
	size_t offset;                 /* offsetof(config struct, field) */
	const char *default_value;     /* text, parsed like a flag value; NULL: unset/0/false */
	uint64_t min, max;             /* numeric range; max 0 = none */
	const char *const *enum_names; /* NULL-terminated, for ST_OPT_ENUM */
	const char *value_name;        /* for --help: FILE, ADDR:PORT, ... */
	const char *help;              /* one paragraph */
	const char *example;           /* may be NULL */
	const char *since;             /* version that added it */
	unsigned flags;                /* ST_OPT_F_* */
};

struct st_config_spec {
	const char *prog;    /* "cloudstream" */
	const char *summary; /* one paragraph for --help and FLAGS.md */
	const char *version;
	const char *kind; /* "CloudStreamConfig": the file's kind; NULL: no apiVersion/kind keys */
	const struct st_opt *opts;
	size_t num_opts;
};

/* What st_config_load asks the caller to do. */
enum st_config_action {
	ST_CONFIG_RUN = 0,
	ST_CONFIG_HELP,          /* --help */
	ST_CONFIG_HELP_MARKDOWN, /* --help-markdown: FLAGS.md */
	ST_CONFIG_VERSION,       /* --version */
	ST_CONFIG_PRINT,         /* --print-config: the effective configuration as JSON */
	ST_CONFIG_CHECK,         /* --check-config: the daemon checks files and addresses, exits */
};

/* st_config_defaults() - set every option to its default. 0, or -EINVAL (a bad default: a bug). */
int st_config_defaults(const struct st_config_spec *spec, void *cfg, char *err, size_t err_len);

/*
 * st_config_set() - set option @name from text, as a flag would. Lists append.
 * Returns 0; -ENOENT (no such option); -EINVAL with a message naming the option and value;
 * -ENOMEM.
 */
int st_config_set(const struct st_config_spec *spec, void *cfg, const char *name, const char *value,
                  char *err, size_t err_len);

/*
 * st_config_parse_json() - apply a JSON object whose keys are option names. Values may be
 * strings (parsed like flags) or native numbers, booleans and arrays of strings. Lists are
 * replaced, not appended. @source names the input in messages. Returns 0; -EINVAL (not an
 * object, unknown key, wrong type, bad value); -EMSGSIZE (over ST_CONFIG_MAX_FILE_BYTES);
 * -ENOMEM. On error the options before the bad one may have been applied.
 */
int st_config_parse_json(const struct st_config_spec *spec, void *cfg, const char *json, size_t len,
                         const char *source, char *err, size_t err_len);

/*
 * st_config_parse_yaml() - apply a YAML document: one block or flow mapping of option names,
 * with apiVersion ST_CONFIG_API_VERSION and the spec's kind (required when spec->kind is set).
 * Scalars are taken as text and parsed like flags (YAML 1.1's yes/on booleans are not: a bool
 * is true or false); a list option takes a sequence of scalars and replaces the default list.
 * Refused, with "@source:LINE: key ..." in @err: a key twice, an unknown key, an empty value,
 * a nested mapping, a second document, anchors, aliases and explicit tags (nothing expands, so
 * the work is bounded by the input's size). Returns 0; -EINVAL; -EMSGSIZE (over
 * ST_CONFIG_MAX_FILE_BYTES); -ENOMEM. On error options before the bad one may have been applied.
 */
int st_config_parse_yaml(const struct st_config_spec *spec, void *cfg, const char *yaml, size_t len,
                         const char *source, char *err, size_t err_len);

/* st_config_parse() - st_config_parse_json() when the first character that is not white space
 * is '{', else st_config_parse_yaml(). Same returns. */
int st_config_parse(const struct st_config_spec *spec, void *cfg, const char *text, size_t len,
                    const char *source, char *err, size_t err_len);

/*
 * st_config_diff() - call @cb for each option whose value differs between @a and @b (two
 * configurations of @spec), in table order. Returns how many differ. Pure.
 */
typedef void (*st_config_diff_cb)(const struct st_opt *o, void *user);
size_t st_config_diff(const struct st_config_spec *spec, const void *a, const void *b,
                      st_config_diff_cb cb, void *user);

/* st_config_copy_opt() - set option @o of @dst to a deep copy of its value in @src. 0 or
 * -ENOMEM (then @dst keeps its value). */
int st_config_copy_opt(const struct st_opt *o, void *dst, const void *src);

/* st_config_cleanup() - free owned strings and lists; the struct may be reused. */
void st_config_cleanup(const struct st_config_spec *spec, void *cfg);

/*
 * st_config_load() - defaults, then the file of --config FILE (wherever it is in argv), then
 * every other flag in order. Sets *@action for --help, --help-markdown, --version,
 * --print-config and --check-config. Returns 0, or a negative errno with a message (with a hint to --help) in @err.
 */
int st_config_load(const struct st_config_spec *spec, void *cfg, int argc, char **argv,
                   enum st_config_action *action, char *err, size_t err_len);

/* st_config_load_file() - apply the YAML or JSON file @path (at most ST_CONFIG_MAX_FILE_BYTES)
 * as st_config_parse() does. 0 or a negative errno with the file named in @err. */
int st_config_load_file(const struct st_config_spec *spec, void *cfg, const char *path, char *err,
                        size_t err_len);
/* st_config_act() - print what @action asks for to @out. 0 or -EIO. */
int st_config_act(const struct st_config_spec *spec, const void *cfg, enum st_config_action action,
                  FILE *out);

/*
 * st_config_apply_reload() - SIGHUP: bring @running up to @fresh (both of @spec; @fresh was
 * loaded as at start, file and flags). Each option whose value differs: an ST_OPT_F_LIVE one
 * is copied into @running and logged ("configuration reloaded: log-level debug"); any other is
 * logged as "needs a restart: NAME" and left as it runs. Values of ST_OPT_F_SECRET options are
 * never logged. Returns how many were applied. Call on the thread that owns @running.
 */
size_t st_config_apply_reload(const struct st_config_spec *spec, void *running, const void *fresh);

void st_config_print_help(const struct st_config_spec *spec, FILE *out);
void st_config_print_markdown(const struct st_config_spec *spec, FILE *out);
void st_config_print_json(const struct st_config_spec *spec, const void *cfg, FILE *out);

/* ---- entries both daemons have ------------------------------------------------------------
 *
 * One definition of each shared option's name, type, default, bounds and value name, so the two
 * daemons cannot drift apart; each says in @help_ what the option means on its side. @off_ is
 * the field's offsetof() in the daemon's own config struct. Where the daemons' values differ by
 * design, the entry takes them as arguments (@default_, @min_: the tunnel's certificate paths,
 * the liveness timers, the admin port, the drain); everything else in it is fixed here. Options
 * one daemon alone has, or that share a name but not a meaning (max-streams counts all nodes on
 * the cloud and one tunnel on the edge; process-buffer-bytes budgets different queues), stay in
 * each table.
 */
extern const char *const st_log_level_names[];      /* error warn info debug (enum st_log_level) */
extern const char *const st_sandbox_mode_names[];   /* off log errno kill (enum st_sandbox_mode) */
extern const char *const st_log_format_names[];     /* text json (enum st_log_format) */
extern const char *const st_on_off_names[];         /* off on: 0 and 1 */
extern const char *const st_node_name_from_names[]; /* system-node-cn cn (enum st_node_name_from) */

/* --node-name-from: how a tunnel certificate names its node. */
enum st_node_name_from {
	ST_NODE_NAME_FROM_SYSTEM_NODE_CN = 0, /* CN=system:node:<name> */
	ST_NODE_NAME_FROM_CN = 1,             /* the CN is the node name */
};

/* The tunnel's mutual TLS: this side's certificate and key, and the CA the other side's
 * certificate must chain to. @default_: the daemon's own path. */
#define ST_OPT_TUNNEL_CERT(off_, default_, help_)                                                  \
	{                                                                                          \
		.name = "tunnel-cert", .type = ST_OPT_STRING, .offset = (off_),                    \
		.default_value = (default_), .value_name = "FILE", .help = (help_),                \
		.flags = ST_OPT_F_RELOAD, .since = "0.1"                                           \
	}

#define ST_OPT_TUNNEL_KEY(off_, default_, help_)                                                   \
	{                                                                                          \
		.name = "tunnel-key", .type = ST_OPT_STRING, .offset = (off_),                     \
		.default_value = (default_), .value_name = "FILE", .help = (help_),                \
		.flags = ST_OPT_F_RELOAD, .since = "0.1"                                           \
	}

#define ST_OPT_TUNNEL_CA(off_, default_, help_)                                                    \
	{                                                                                          \
		.name = "tunnel-ca", .type = ST_OPT_STRING, .offset = (off_),                      \
		.default_value = (default_), .value_name = "FILE", .help = (help_),                \
		.flags = ST_OPT_F_RELOAD, .since = "0.1"                                           \
	}

#define ST_OPT_NODE_NAME_FROM(off_, help_)                                                         \
	{                                                                                          \
		.name = "node-name-from", .type = ST_OPT_ENUM, .offset = (off_),                   \
		.default_value = "system-node-cn", .enum_names = st_node_name_from_names,          \
		.value_name = "MODE", .help = (help_), .since = "0.1"                              \
	}

/* The tunnel's liveness (stream/liveness.h): ping after @default_ of quiet, drop after
 * @default_ of silence. The edge pings sooner and gives up sooner than the cloud, and accepts
 * shorter values (@min_) for tests. */
#define ST_OPT_PING_INTERVAL(off_, default_, min_, help_)                                          \
	{                                                                                          \
		.name = "ping-interval", .type = ST_OPT_DURATION_MS, .offset = (off_),             \
		.default_value = (default_), .min = (min_), .max = 3600000,                        \
		.value_name = "DURATION", .help = (help_), .since = "0.1"                          \
	}

#define ST_OPT_DEAD_PEER_TIMEOUT(off_, default_, min_, help_)                                      \
	{                                                                                          \
		.name = "dead-peer-timeout", .type = ST_OPT_DURATION_MS, .offset = (off_),         \
		.default_value = (default_), .min = (min_), .max = 3600000,                        \
		.value_name = "DURATION", .help = (help_), .since = "0.1"                          \
	}

/* The plain-HTTP admin port (stream/admin.h). @default_: each daemon has its own port. */
#define ST_OPT_ADMIN_LISTEN(off_, default_, help_)                                                 \
	{                                                                                          \
		.name = "admin-listen", .type = ST_OPT_STRING, .offset = (off_),                   \
		.default_value = (default_), .value_name = "ADDR:PORT", .help = (help_),           \
		.since = "0.1"                                                                     \
	}

#define ST_OPT_LOG_LEVEL(off_)                                                                     \
	{                                                                                          \
		.name = "log-level", .type = ST_OPT_ENUM, .offset = (off_),                        \
		.default_value = "info", .enum_names = st_log_level_names, .value_name = "LEVEL",  \
		.help = "Least severe log level written to stderr.", .since = "0.1",               \
		.flags = ST_OPT_F_LIVE                                                             \
	}

#define ST_OPT_LOG_FORMAT(off_)                                                                    \
	{                                                                                          \
		.name = "log-format", .type = ST_OPT_ENUM, .offset = (off_),                       \
		.default_value = "text", .enum_names = st_log_format_names,                        \
		.value_name = "FORMAT",                                                            \
		.help = "How log lines are written: text (time, level, node=, stream=, message) "  \
		        "or json (one object a line with the keys time, level, node, stream and "  \
		        "msg; node and stream only when the line has them).",                      \
		.example = "--log-format json", .since = "0.3", .flags = ST_OPT_F_LIVE             \
	}

#define ST_OPT_ACCESS_LOG(off_, help_)                                                             \
	{                                                                                          \
		.name = "access-log", .type = ST_OPT_ENUM, .offset = (off_),                       \
		.default_value = "on", .enum_names = st_on_off_names, .value_name = "on|off",      \
		.help = (help_), .example = "--access-log off", .since = "0.3",                    \
		.flags = ST_OPT_F_LIVE                                                             \
	}

#define ST_OPT_SANDBOX(off_, help_)                                                                \
	{                                                                                          \
		.name = "sandbox", .type = ST_OPT_ENUM, .offset = (off_),                          \
		.default_value = "errno", .enum_names = st_sandbox_mode_names,                     \
		.value_name = "MODE", .help = (help_), .since = "0.1"                              \
	}

#define ST_OPT_READY_FILE(off_, help_)                                                             \
	{                                                                                          \
		.name = "ready-file", .type = ST_OPT_STRING, .offset = (off_),                     \
		.value_name = "FILE", .help = (help_), .since = "0.1"                              \
	}

#define ST_OPT_STALL_TIMEOUT(off_, help_)                                                          \
	{                                                                                          \
		.name = "stall-timeout", .type = ST_OPT_DURATION_MS, .offset = (off_),             \
		.default_value = "2s", .min = 50, .max = 60000, .value_name = "DURATION",          \
		.help = (help_), .since = "0.2"                                                    \
	}

#define ST_OPT_STREAM_WINDOW_BYTES(off_, help_)                                                    \
	{                                                                                          \
		.name = "stream-window-bytes", .type = ST_OPT_BYTES, .offset = (off_),             \
		.default_value = "1MiB", .min = 1024, .max = ST_MAX_STREAM_WINDOW_BYTES,           \
		.value_name = "BYTES", .help = (help_), .since = "0.1"                             \
	}

#define ST_OPT_STREAM_FIRST_WINDOW_BYTES(off_, help_)                                              \
	{                                                                                          \
		.name = "stream-first-window-bytes", .type = ST_OPT_BYTES, .offset = (off_),       \
		.default_value = "64KiB", .min = 1024, .max = ST_MAX_STREAM_WINDOW_BYTES,          \
		.value_name = "BYTES", .help = (help_), .since = "0.2"                             \
	}

#define ST_OPT_STREAM_QUEUE_BYTES(off_, help_)                                                     \
	{                                                                                          \
		.name = "stream-queue-bytes", .type = ST_OPT_BYTES, .offset = (off_),              \
		.default_value = "256KiB", .min = 4096, .max = 64ull * 1024 * 1024,                \
		.value_name = "BYTES", .help = (help_), .since = "0.1"                             \
	}

#define ST_OPT_DATA_PAYLOAD_BYTES(off_, help_)                                                     \
	{                                                                                          \
		.name = "data-payload-bytes", .type = ST_OPT_BYTES, .offset = (off_),              \
		.default_value = "64KiB", .min = 256, .max = 512ull * 1024, .value_name = "BYTES", \
		.help = (help_), .since = "0.1"                                                    \
	}

/* @default_: the daemons differ (a Deployment's grace period is longer than a node agent's). */
#define ST_OPT_DRAIN_TIMEOUT(off_, default_, help_)                                                \
	{                                                                                          \
		.name = "drain-timeout", .type = ST_OPT_DURATION_MS, .offset = (off_),             \
		.default_value = (default_), .min = 0, .max = 3600000, .value_name = "DURATION",   \
		.help = (help_), .since = "0.1"                                                    \
	}

#endif /* STREAM_CONFIG_H */
