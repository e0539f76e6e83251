/* Fuzz target: the YAML config file parser (stream/config.h, config_yaml.c) over a table with
 * every option type and a kind (fuzz_config_table.h). Whatever the input, cleanup must free
 * everything (LeakSanitizer), values that were accepted must be within their ranges, and an
 * accepted file must have named its apiVersion and kind. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_config_table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (fuzz_config_run(&fuzz_config_spec, st_config_parse_yaml, data, size) &&
	    (memmem(data, size, "FuzzConfig", 10) == NULL ||
	     memmem(data, size, "v1alpha1", 8) == NULL))
		abort(); /* accepted without the header */
	return 0;
}
