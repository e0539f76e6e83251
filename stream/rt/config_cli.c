/*
 * stream/rt/config_cli.c — the I/O half of stream/config.h: reading --config, argv, and
 * printing --help, FLAGS.md and the effective configuration.
 */
#include <stream/config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include <stream/log.h>

static int read_file(const char *path, char **out, size_t *len, char *err, size_t err_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		snprintf(err, err_len, "--config %s: %s", path, strerror(e));
		return -e;
	}
	char *buf = malloc(ST_CONFIG_MAX_FILE_BYTES + 1);
	if (buf == NULL) {
		close(fd);
		return -ENOMEM;
	}
	size_t n = 0;
	for (;;) {
		ssize_t r = read(fd, buf + n, ST_CONFIG_MAX_FILE_BYTES + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			snprintf(err, err_len, "--config %s: %s", path, strerror(e));
			free(buf);
			close(fd);
			return -e;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > ST_CONFIG_MAX_FILE_BYTES) {
			snprintf(err, err_len, "--config %s: over %u bytes", path,
			         ST_CONFIG_MAX_FILE_BYTES);
			free(buf);
			close(fd);
			return -EMSGSIZE;
		}
	}
	close(fd);
	*out = buf;
	*len = n;
	return 0;
}

int st_config_load_file(const struct st_config_spec *spec, void *cfg, const char *path, char *err,
                        size_t err_len)
{
	char *buf = NULL;
	size_t len = 0;
	int rc = read_file(path, &buf, &len, err, err_len);
	if (rc < 0)
		return rc;
	rc = st_config_parse(spec, cfg, buf, len, path, err, err_len);
	free(buf);
	return rc;
}

static const struct st_opt *find_opt(const struct st_config_spec *spec, const char *name,
                                     size_t len)
{
	for (size_t i = 0; i < spec->num_opts; i++)
		if (strlen(spec->opts[i].name) == len && memcmp(spec->opts[i].name, name, len) == 0)
			return &spec->opts[i];
	return NULL;
}

int st_config_load(const struct st_config_spec *spec, void *cfg, int argc, char **argv,
                   enum st_config_action *action, char *err, size_t err_len)
{
	*action = ST_CONFIG_RUN;
	err[0] = '\0';
	int rc = st_config_defaults(spec, cfg, err, err_len);
	if (rc < 0)
		return rc;
	/* The file first, wherever --config is, so every flag overrides it. */
	for (int i = 1; i < argc; i++) {
		const char *path = NULL;
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			path = argv[i + 1];
		else if (strncmp(argv[i], "--config=", 9) == 0)
			path = argv[i] + 9;
		if (path == NULL)
			continue;
		rc = st_config_load_file(spec, cfg, path, err, err_len);
		if (rc < 0)
			return rc;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			*action = ST_CONFIG_HELP;
			return 0;
		}
		if (strcmp(a, "--help-markdown") == 0) {
			*action = ST_CONFIG_HELP_MARKDOWN;
			return 0;
		}
		if (strcmp(a, "--version") == 0) {
			*action = ST_CONFIG_VERSION;
			return 0;
		}
		if (strcmp(a, "--print-config") == 0) {
			*action = ST_CONFIG_PRINT;
			continue; /* the other flags still apply */
		}
		if (strcmp(a, "--check-config") == 0) {
			*action = ST_CONFIG_CHECK;
			continue; /* checks the configuration the other flags make */
		}
		if (strcmp(a, "--config") == 0) {
			i++;
			continue;
		}
		if (strncmp(a, "--config=", 9) == 0)
			continue;
		if (strncmp(a, "--", 2) != 0) {
			snprintf(err, err_len, "unexpected argument \"%.64s\"; see --help", a);
			return -EINVAL;
		}
		const char *name = a + 2;
		const char *eq = strchr(name, '=');
		size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
		const struct st_opt *o = find_opt(spec, name, nlen);
		if (o == NULL) {
			snprintf(err, err_len, "unknown flag --%.*s; see --help",
			         (int)(nlen > 64 ? 64 : nlen), name);
			return -EINVAL;
		}
		const char *value;
		if (eq)
			value = eq + 1;
		else if (o->type == ST_OPT_BOOL)
			value = "true";
		else if (i + 1 < argc)
			value = argv[++i];
		else {
			snprintf(err, err_len, "--%s needs a value (%s); see --help", o->name,
			         o->value_name ? o->value_name : "VALUE");
			return -EINVAL;
		}
		rc = st_config_set(spec, cfg, o->name, value, err, err_len);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static const char *type_name(const struct st_opt *o)
{
	switch (o->type) {
	case ST_OPT_STRING:
		return "string";
	case ST_OPT_U64:
		return "integer";
	case ST_OPT_BOOL:
		return "boolean";
	case ST_OPT_ENUM:
		return "one of a set";
	case ST_OPT_DURATION_MS:
		return "duration (250ms, 5s, 2m, 1h)";
	case ST_OPT_BYTES:
		return "byte size (65536, 64KiB, 1MiB, 1GiB)";
	case ST_OPT_STRING_LIST:
		return "list of strings (repeat the flag or separate with commas; a list in the "
		       "file)";
	}
	return "?";
}

/* Prints @text wrapped at 78 columns with @indent spaces. */
static void wrap(FILE *out, const char *text, int indent)
{
	int col = 0;
	const char *p = text;
	while (*p) {
		const char *sp = strchr(p, ' ');
		size_t w = sp ? (size_t)(sp - p) : strlen(p);
		if (col == 0) {
			fprintf(out, "%*s", indent, "");
			col = indent;
		} else if (col + 1 + (int)w > 78) {
			fprintf(out, "\n%*s", indent, "");
			col = indent;
		} else {
			fputc(' ', out);
			col++;
		}
		fwrite(p, 1, w, out);
		col += (int)w;
		p += w;
		while (*p == ' ')
			p++;
	}
	if (col)
		fputc('\n', out);
}

static void range_text(const struct st_opt *o, char *buf, size_t cap)
{
	buf[0] = '\0';
	if (o->type == ST_OPT_ENUM) {
		size_t n = 0;
		for (int i = 0; o->enum_names[i] && n < cap; i++) {
			int w = snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", o->enum_names[i]);
			if (w < 0)
				break;
			n += (size_t)w;
		}
	} else if ((o->type == ST_OPT_U64 || o->type == ST_OPT_DURATION_MS ||
	            o->type == ST_OPT_BYTES) &&
	           (o->min || o->max)) {
		snprintf(buf, cap, "%llu to %llu%s", (unsigned long long)o->min,
		         (unsigned long long)o->max,
		         o->type == ST_OPT_DURATION_MS ? " ms"
		         : o->type == ST_OPT_BYTES     ? " bytes"
		                                       : "");
	}
}

void st_config_print_help(const struct st_config_spec *spec, FILE *out)
{
	fprintf(out, "usage: %s [--config FILE] [--FLAG VALUE]...\n\n", spec->prog);
	wrap(out, spec->summary, 0);
	fprintf(out, "\nEvery flag is also a key of the --config file (YAML or JSON); flags "
	             "override the file.\n\nflags:\n");
	for (size_t i = 0; i < spec->num_opts; i++) {
		const struct st_opt *o = &spec->opts[i];
		fprintf(out, "  --%s %s\n", o->name,
		        o->type == ST_OPT_BOOL ? ""
		        : o->value_name        ? o->value_name
		                               : "VALUE");
		wrap(out, o->help, 6);
		char range[256];
		range_text(o, range, sizeof range);
		if (o->type == ST_OPT_ENUM)
			fprintf(out, "      values: %s\n", range);
		else if (range[0])
			fprintf(out, "      range: %s\n", range);
		if (o->default_value && !(o->flags & ST_OPT_F_SECRET))
			fprintf(out, "      default: %s\n", o->default_value);
		if (o->flags & ST_OPT_F_RELOAD)
			fprintf(out, "      reloaded on SIGHUP\n");
		if (o->flags & ST_OPT_F_LIVE)
			fprintf(out, "      a new value in the file is applied on SIGHUP\n");
	}
	fprintf(out,
	        "  --config FILE\n      YAML (apiVersion %s, kind %s) or JSON object of flag "
	        "names and values, read first and again on SIGHUP.\n"
	        "  --check-config\n      check the configuration, its files and addresses; "
	        "exit 0 (good) or 2, starting nothing.\n"
	        "  --print-config\n      print the effective configuration as JSON and exit.\n"
	        "  --help, --help-markdown, --version\n"
	        "      this text; the FLAGS.md document; the version.\n",
	        ST_CONFIG_API_VERSION, spec->kind ? spec->kind : "-");
}

void st_config_print_markdown(const struct st_config_spec *spec, FILE *out)
{
	fprintf(out, "# %s flags\n\n<!-- Generated by `%s --help-markdown`; do not edit. -->\n\n",
	        spec->prog, spec->prog);
	fprintf(out, "%s\n\n", spec->summary);
	fprintf(out,
	        "Every flag is also a key of the file given with `--config FILE`, with the same "
	        "name; flags override the file wherever they appear. The file is YAML, or JSON "
	        "(a file whose first character is `{`). Unknown keys, a key given twice, YAML "
	        "anchors, aliases and tags are errors naming the file, the line and the key. "
	        "Durations take `ms`, `s`, `m`, `h` (a bare number is milliseconds); byte sizes "
	        "take `KiB`, `MiB`, `GiB`.\n\n");
	if (spec->kind)
		fprintf(out,
		        "A YAML file starts with `apiVersion: %s` and `kind: %s`; both are "
		        "required. A JSON file may leave them out (files written before there was "
		        "a "
		        "version), and when it has them they must be these.\n\n",
		        ST_CONFIG_API_VERSION, spec->kind);
	fprintf(out, "```yaml\n");
	if (spec->kind)
		fprintf(out, "apiVersion: %s\nkind: %s\n", ST_CONFIG_API_VERSION, spec->kind);
	int shown = 0;
	for (size_t i = 0; i < spec->num_opts && shown < 3; i++) {
		const struct st_opt *o = &spec->opts[i];
		if (o->default_value == NULL || o->type == ST_OPT_STRING_LIST)
			continue;
		fprintf(out, "%s: %s\n", o->name, o->default_value);
		shown++;
	}
	fprintf(out, "```\n\n");
	fprintf(out,
	        "`--check-config` checks the configuration without starting: the file and the "
	        "flags, that the certificates, keys and CAs load and match, that every listen "
	        "address is one of this host's (bound on port 0: its own port may be held by the "
	        "running daemon, which is said but is no error), and the URLs. It prints what is "
	        "wrong and exits 2, or exits 0; it starts nothing and joins nothing.\n\n"
	        "On SIGHUP the file is read again (the flags still override it). What a new file "
	        "changes is applied for the options whose table has the row `SIGHUP | a new value "
	        "is applied`; any other change "
	        "is logged as `needs a restart: NAME` and the running value stays. A file that "
	        "does not load changes nothing (the error is logged).\n\n");
	for (size_t i = 0; i < spec->num_opts; i++) {
		const struct st_opt *o = &spec->opts[i];
		fprintf(out, "## --%s\n\n%s\n\n", o->name, o->help);
		fprintf(out, "| | |\n|---|---|\n| type | %s |\n", type_name(o));
		char range[256];
		range_text(o, range, sizeof range);
		if (range[0])
			fprintf(out, "| %s | %s |\n", o->type == ST_OPT_ENUM ? "values" : "range",
			        range);
		fprintf(out, "| default | %s |\n", o->default_value ? o->default_value : "(none)");
		if (o->flags & ST_OPT_F_RELOAD)
			fprintf(out, "| reload | re-read on SIGHUP |\n");
		if (o->flags & ST_OPT_F_LIVE)
			fprintf(out, "| SIGHUP | a new value is applied |\n");
		fprintf(out, "| since | %s |\n\n", o->since ? o->since : "0.1");
		if (o->example)
			fprintf(out, "Example: `%s`\n\n", o->example);
	}
}

void st_config_print_json(const struct st_config_spec *spec, const void *cfg, FILE *out)
{
	struct json_object *root = json_object_new_object();
	if (root == NULL)
		return;
	for (size_t i = 0; i < spec->num_opts; i++) {
		const struct st_opt *o = &spec->opts[i];
		const void *f = (const char *)cfg + o->offset;
		struct json_object *v = NULL;
		if (o->flags & ST_OPT_F_SECRET) {
			v = json_object_new_string("<redacted>");
		} else {
			switch (o->type) {
			case ST_OPT_STRING:
				v = *(char *const *)f ? json_object_new_string(*(char *const *)f)
				                      : NULL;
				break;
			case ST_OPT_U64:
			case ST_OPT_DURATION_MS:
			case ST_OPT_BYTES:
				v = json_object_new_uint64(*(const uint64_t *)f);
				break;
			case ST_OPT_BOOL:
				v = json_object_new_boolean(*(const bool *)f);
				break;
			case ST_OPT_ENUM:
				v = json_object_new_string(o->enum_names[*(const int *)f]);
				break;
			case ST_OPT_STRING_LIST: {
				const struct st_strlist *l = f;
				v = json_object_new_array();
				for (size_t k = 0; v && k < l->n; k++)
					json_object_array_add(v, json_object_new_string(l->v[k]));
				break;
			}
			}
		}
		json_object_object_add(root, o->name, v);
	}
	fprintf(out, "%s\n",
	        json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY |
	                                                     JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(root);
}

int st_config_act(const struct st_config_spec *spec, const void *cfg, enum st_config_action action,
                  FILE *out)
{
	switch (action) {
	case ST_CONFIG_HELP:
		st_config_print_help(spec, out);
		break;
	case ST_CONFIG_HELP_MARKDOWN:
		st_config_print_markdown(spec, out);
		break;
	case ST_CONFIG_VERSION:
		fprintf(out, "%s %s\n", spec->prog, spec->version);
		break;
	case ST_CONFIG_PRINT:
		st_config_print_json(spec, cfg, out);
		break;
	case ST_CONFIG_RUN:
	case ST_CONFIG_CHECK: /* the daemon's own checks */
		break;
	}
	return fflush(out) == 0 ? 0 : -EIO;
}

/* ---- SIGHUP --------------------------------------------------------------------------------- */

/* The value of @o in @cfg as text for a log line (bounded; lists joined by commas). */
static void value_text(const struct st_opt *o, const void *cfg, char *buf, size_t cap)
{
	const void *f = (const char *)cfg + o->offset;
	buf[0] = '\0';
	if (o->flags & ST_OPT_F_SECRET) {
		snprintf(buf, cap, "<redacted>");
		return;
	}
	switch (o->type) {
	case ST_OPT_STRING:
		snprintf(buf, cap, "\"%.200s\"", *(char *const *)f ? *(char *const *)f : "");
		return;
	case ST_OPT_U64:
	case ST_OPT_DURATION_MS:
	case ST_OPT_BYTES:
		snprintf(buf, cap, "%llu%s", (unsigned long long)*(const uint64_t *)f,
		         o->type == ST_OPT_DURATION_MS ? " ms" : "");
		return;
	case ST_OPT_BOOL:
		snprintf(buf, cap, "%s", *(const bool *)f ? "true" : "false");
		return;
	case ST_OPT_ENUM:
		snprintf(buf, cap, "%s", o->enum_names[*(const int *)f]);
		return;
	case ST_OPT_STRING_LIST: {
		const struct st_strlist *l = f;
		size_t n = 0;
		for (size_t i = 0; i < l->n && n < cap; i++) {
			int w = snprintf(buf + n, cap - n, "%s%s", i ? "," : "", l->v[i]);
			if (w < 0)
				break;
			n += (size_t)w;
		}
		return;
	}
	}
}

struct reload_ctx {
	void *running;
	const void *fresh;
	size_t applied;
};

static void on_changed(const struct st_opt *o, void *user)
{
	struct reload_ctx *r = user;
	char was[256], now[256];
	value_text(o, r->running, was, sizeof was);
	value_text(o, r->fresh, now, sizeof now);
	if (!(o->flags & ST_OPT_F_LIVE)) {
		st_warn("configuration reloaded: needs a restart: %s (runs with %s, the file says "
		        "%s)",
		        o->name, was, now);
		return;
	}
	if (st_config_copy_opt(o, r->running, r->fresh) < 0) {
		st_err("configuration reloaded: %s not applied: out of memory", o->name);
		return;
	}
	r->applied++;
	st_info("configuration reloaded: %s %s (was %s)", o->name, now, was);
}

size_t st_config_apply_reload(const struct st_config_spec *spec, void *running, const void *fresh)
{
	struct reload_ctx r = {.running = running, .fresh = fresh};
	size_t changed = st_config_diff(spec, running, fresh, on_changed, &r);
	if (changed == 0)
		st_info("configuration reloaded: nothing changed");
	return r.applied;
}
