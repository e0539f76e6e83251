/*
 * stream/err.h — error codes shared by every module.
 *
 * Functions that can fail return int: 0 on success, a negative errno on failure. Byte consumers
 * and producers return ssize_t tri-state: >0 bytes done, 0 need more / nothing to do, <0 error.
 * The meanings below are fixed for the whole project; syscall errors pass through as -errno.
 *
 *   -EINVAL      caller bug (bad argument, wrong use of the API)
 *   -ENOMEM      allocation failed
 *   -EAGAIN      no progress possible now (buffer full, window spent); retry later
 *   -EBADMSG     malformed bytes from the peer
 *   -EMSGSIZE    a limit was exceeded (message, header, buffer cap)
 *   -EPROTO      a well-formed message that is not allowed in the current state
 *   -ECONNRESET  the peer ended the stream or the connection abnormally
 *   -ETIMEDOUT   a deadline passed
 *   -EACCES      an identity or a request was refused by policy
 *   -ENOENT      the thing named does not exist (node without session, unknown container)
 *   -ENOTSUP     the peer did not negotiate the feature required
 *   -ENOSPC      a byte budget is spent (budget.h): nothing more may be held now
 */
#ifndef STREAM_ERR_H
#define STREAM_ERR_H

#include <errno.h>
#include <stdbool.h>

/*
 * st_strerror() - a short human-readable name for a return code.
 * @rc: 0 or a negative errno.
 *
 * Returns a static string ("ok", "malformed message", ...); never NULL. Thread-safe.
 */
const char *st_strerror(int rc);

/*
 * st_err_is_fatal() - does this error end the whole tunnel (true) or only one stream (false)?
 * @rc: a negative errno returned by a stream/ function.
 *
 * Malformed or oversized tunnel messages, protocol violations and allocation failures are fatal
 * for the connection they came from (the peer can no longer be trusted to be in sync); -EAGAIN,
 * -EACCES, -ENOENT, -ETIMEDOUT and -ECONNRESET only concern one stream. Like nghttp2_is_fatal.
 */
bool st_err_is_fatal(int rc);

#endif /* STREAM_ERR_H */
