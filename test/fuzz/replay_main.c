/* Replays a libFuzzer corpus through LLVMFuzzerTestOneInput without libFuzzer, so the corpora
 * run as ordinary regression tests under gcc + ASan/UBSan. Arguments are files or directories
 * (one level deep). Exit 0 when every input ran; a crash aborts through the sanitizer. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Corpus inputs are kept small (max_len in the fuzz runs); refuse anything absurd. */
#define REPLAY_MAX_INPUT_BYTES (4u << 20)

static int replay_file(const char *path, unsigned *count)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	uint8_t *buf = malloc(REPLAY_MAX_INPUT_BYTES);
	if (buf == NULL) {
		fclose(f);
		return -1;
	}
	size_t n = fread(buf, 1, REPLAY_MAX_INPUT_BYTES, f);
	int too_big = !feof(f);
	fclose(f);
	if (too_big) {
		fprintf(stderr, "replay: %s: larger than %u bytes\n", path, REPLAY_MAX_INPUT_BYTES);
		free(buf);
		return -1;
	}
	/* Copy into an exact-size allocation so ASan sees reads past the end. */
	uint8_t *exact = malloc(n ? n : 1);
	if (exact == NULL) {
		free(buf);
		return -1;
	}
	memcpy(exact, buf, n);
	free(buf);
	LLVMFuzzerTestOneInput(exact, n);
	free(exact);
	(*count)++;
	return 0;
}

static int replay_path(const char *path, unsigned *count)
{
	struct stat st;
	if (stat(path, &st) != 0) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return replay_file(path, count);
	DIR *d = opendir(path);
	if (d == NULL) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	int rc = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char child[4096];
		int len = snprintf(child, sizeof child, "%s/%s", path, de->d_name);
		if (len < 0 || (size_t)len >= sizeof child) {
			rc = -1;
			continue;
		}
		if (replay_file(child, count) != 0)
			rc = -1;
	}
	closedir(d);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned count = 0;
	int rc = 0;
	for (int i = 1; i < argc; i++)
		if (replay_path(argv[i], &count) != 0)
			rc = 1;
	/* Also run the empty input once: every target must cope with it. */
	LLVMFuzzerTestOneInput((const uint8_t *)"", 0);
	printf("replay: %u inputs, %s\n", count, rc ? "errors" : "ok");
	if (count == 0) {
		fprintf(stderr, "replay: empty corpus\n");
		return 1;
	}
	return rc;
}
