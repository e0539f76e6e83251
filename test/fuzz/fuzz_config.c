/* Fuzz target: the JSON config file parser (stream/config.h) over a table with every option
 * type (fuzz_config_table.h), without a kind as the files from before there was one. Whatever
 * the input, cleanup must free everything (LeakSanitizer) and values that were accepted must be
 * within their ranges. */
#include <stdint.h>

#include "fuzz_config_table.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct st_config_spec spec = fuzz_config_spec;
	spec.kind = NULL;
	(void)fuzz_config_run(&spec, st_config_parse_json, data, size);
	return 0;
}
