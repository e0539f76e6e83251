package edgestream

import (
	"errors"
	"syscall"
)

// Error is a failure reported by libedgestream: what was being done, the library's negative
// errno as a syscall.Errno, and its reason text (the message it wrote, or for a tunnel that
// went down the reason it gave).
//
// errors.Is works on the errno: errors.Is(err, syscall.ENOENT) for an unknown option (also
// fs.ErrNotExist), syscall.EINVAL for a bad value or configuration, syscall.ECONNREFUSED for a
// failed dial, and so on (edgestream.h and stream/err.h give the meanings).
type Error struct {
	Op     string        // "config set cloud-url", "config load FILE", "new", "tunnel"
	Errno  syscall.Errno // the library's return code, made positive
	Reason string        // the library's message; may be empty
}

func (e *Error) Error() string {
	if e.Reason != "" {
		return "edgestream: " + e.Op + ": " + e.Reason
	}
	return "edgestream: " + e.Op + ": " + e.Errno.Error()
}

// Unwrap returns the errno, so errors.Is and errors.As see it.
func (e *Error) Unwrap() error { return e.Errno }

var (
	// ErrClosed is returned by operations on a Tunnel or Config after Close.
	ErrClosed = errors.New("edgestream: closed")
	// ErrStarted is returned by Start and Run when the loop runs already or has run: an
	// instance runs its loop once (make a new one to dial again from scratch).
	ErrStarted = errors.New("edgestream: already started")
)

// cError turns a negative return code and the library's message into an *Error.
func cError(op string, rc int, reason string) error {
	if rc >= 0 {
		return nil
	}
	return &Error{Op: op, Errno: syscall.Errno(-rc), Reason: reason}
}
