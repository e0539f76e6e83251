/*
 * stream/src/config_int.h — what the configuration parsers share (config.c: values from text,
 * defaults, SIGHUP comparison; config_json.c: JSON files; config_yaml.c: YAML files). Pure,
 * like them.
 */
#ifndef STREAM_CONFIG_INT_H
#define STREAM_CONFIG_INT_H

#include <stream/config.h>

/* Formats a message into @err (@err_len bytes, always terminated); nothing when @err is NULL. */
void st__config_msg(char *err, size_t err_len, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* The option named by the @len bytes at @name, or NULL. */
const struct st_opt *st__config_find(const struct st_config_spec *spec, const char *name,
                                     size_t len);

/* Sets @o from @text as a flag would (lists append). 0, -EINVAL with a message, -ENOMEM. */
int st__config_set_value(const struct st_opt *o, void *cfg, const char *text, char *err,
                         size_t err_len);

/* A list option: append a copy of @p (@len bytes); -E2BIG past ST_CONFIG_MAX_LIST, -ENOMEM. */
int st__config_list_append(const struct st_opt *o, void *cfg, const char *p, size_t len);

/* A list option: empty it (a file's list replaces the default one). */
void st__config_list_clear(const struct st_opt *o, void *cfg);

#endif /* STREAM_CONFIG_INT_H */
