/* Error names and the fatal/non-fatal split (see stream/err.h). */
#include <stream/err.h>

const char *st_strerror(int rc)
{
	switch (rc) {
	case 0:
		return "ok";
	case -EINVAL:
		return "invalid argument";
	case -ENOMEM:
		return "out of memory";
	case -EAGAIN:
		return "would block";
	case -EBADMSG:
		return "malformed message";
	case -EMSGSIZE:
		return "over limit";
	case -EPROTO:
		return "protocol violation";
	case -ECONNRESET:
		return "reset by peer";
	case -ETIMEDOUT:
		return "timed out";
	case -EACCES:
		return "access denied";
	case -ENOENT:
		return "not found";
	case -ENOTSUP:
		return "not supported";
	case -ECONNREFUSED:
		return "connection refused";
	case -EPIPE:
		return "broken pipe";
	case -ENOSPC:
		return "memory budget spent";
	default:
		return "error";
	}
}

bool st_err_is_fatal(int rc)
{
	switch (rc) {
	case -EBADMSG:
	case -EMSGSIZE:
	case -EPROTO:
	case -ENOMEM:
		return true;
	default:
		return false;
	}
}
