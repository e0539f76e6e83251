/* File output and error text for the certs library. */
#include <certs/certs.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "certs_int.h"

void certs__fail(char *err, size_t errlen, const char *what)
{
	size_t off = 0;
	if (err != NULL && errlen > 0) {
		int n = snprintf(err, errlen, "%s", what);
		off = n > 0 ? (size_t)n : 0;
	}
	/* Drain the queue even when nobody reads it, so the next caller starts clean. */
	unsigned long e;
	while ((e = ERR_get_error()) != 0) {
		if (err == NULL || off + 3 >= errlen)
			continue;
		char buf[256];
		ERR_error_string_n(e, buf, sizeof buf);
		int n = snprintf(err + off, errlen - off, ": %s", buf);
		if (n > 0)
			off += (size_t)n < errlen - off ? (size_t)n : errlen - off - 1;
	}
}

int certs__write_file(const char *path, const void *data, size_t len, unsigned mode, bool overwrite)
{
	if (!overwrite && access(path, F_OK) == 0)
		return -EEXIST;
	char tmp[PATH_MAX];
	int n = snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	if (n < 0 || (size_t)n >= sizeof tmp)
		return -ENAMETOOLONG;
	unlink(tmp);
	/* Created with its final mode: a private key is never readable by others, not even for a
	 * moment (the umask can only remove bits). */
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
	if (fd < 0)
		return -errno;
	const char *p = data;
	size_t off = 0;
	int rc = 0;
	while (off < len) {
		ssize_t w = write(fd, p + off, len - off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		off += (size_t)w;
	}
	if (rc == 0 && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) != 0)
		rc = -errno;
	if (rc != 0)
		unlink(tmp);
	return rc;
}

/* The PEM file @path, open for reading; NULL with *@rc = -errno and @err "PATH: why". */
static FILE *pem_open(const char *path, int *rc, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	if (f == NULL) {
		*rc = -errno;
		if (err && errlen)
			snprintf(err, errlen, "%s: %s", path, strerror(-*rc));
	}
	return f;
}

/* @path held no PEM @what: -EBADMSG, and @err says so with OpenSSL's reasons. */
static int pem_missing(const char *path, const char *what, char *err, size_t errlen)
{
	char why[512];
	snprintf(why, sizeof why, "%s: no PEM %s", path, what);
	certs__fail(err, errlen, why);
	return -EBADMSG;
}

int certs_load(const char *path, X509 **out, char *err, size_t errlen)
{
	int rc;
	FILE *f = pem_open(path, &rc, err, errlen);
	if (f == NULL)
		return rc;
	X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	if (x == NULL)
		return pem_missing(path, "certificate", err, errlen);
	*out = x;
	return 0;
}

int certs__load_key(const char *path, EVP_PKEY **out, char *err, size_t errlen)
{
	int rc;
	FILE *f = pem_open(path, &rc, err, errlen);
	if (f == NULL)
		return rc;
	*out = PEM_read_PrivateKey(f, NULL, NULL, NULL);
	fclose(f);
	return *out ? 0 : pem_missing(path, "private key", err, errlen);
}

int certs_check_cert(const char *path, char *err, size_t errlen)
{
	if (path == NULL || path[0] == '\0') {
		snprintf(err, errlen, "no file given");
		return -EINVAL;
	}
	X509 *x = NULL;
	int rc = certs_load(path, &x, err, errlen);
	if (rc == 0)
		X509_free(x);
	return rc;
}

int certs_check_pair(const char *cert_path, const char *key_path, char *err, size_t errlen)
{
	X509 *x = NULL;
	int rc = certs_check_cert(cert_path, err, errlen);
	if (rc < 0 || (rc = certs_load(cert_path, &x, err, errlen)) < 0)
		return rc;
	if (key_path == NULL || key_path[0] == '\0') {
		snprintf(err, errlen, "key: no file given");
		X509_free(x);
		return -EINVAL;
	}
	EVP_PKEY *k = NULL;
	rc = certs__load_key(key_path, &k, err, errlen);
	if (rc == 0 && X509_check_private_key(x, k) != 1) {
		ERR_clear_error();
		snprintf(err, errlen, "%s does not match the certificate %s", key_path, cert_path);
		rc = -EINVAL;
	}
	EVP_PKEY_free(k);
	X509_free(x);
	return rc;
}
