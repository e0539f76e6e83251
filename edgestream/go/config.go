package edgestream

/*
#cgo pkg-config: edgestream
#include <stdlib.h>
#include <edgestream/edgestream.h>
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// errBytes is the size of the message buffer handed to the library's err/errlen parameters.
const errBytes = 512

// Config is a set of edgestream options, the daemon's flags by name (edgestream/FLAGS.md)
// without the leading "--". It starts with every option at its default. New copies it, so one
// Config may make several tunnels and may be closed once they are made.
//
// A Config is safe for use by several goroutines (calls are serialised).
type Config struct {
	mu sync.Mutex
	c  *C.struct_edgestream_config // nil once closed
}

// NewConfig returns a Config with every option at its default.
func NewConfig() (*Config, error) {
	var c *C.struct_edgestream_config
	if rc := int(C.edgestream_config_new(&c)); rc < 0 {
		return nil, cError("config new", rc, "")
	}
	cfg := &Config{c: c}
	// A safety net only: Close frees the C memory as soon as the Config is not needed.
	runtime.SetFinalizer(cfg, (*Config).Close)
	return cfg, nil
}

// Set sets option @name (a daemon flag without "--", e.g. "cloud-url") from text, as the flag
// would. Options that are lists (local-port) append. Errors: an *Error wrapping
// syscall.ENOENT (no such option) or syscall.EINVAL (bad value, with the library's message).
func (c *Config) Set(name, value string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c == nil {
		return ErrClosed
	}
	cname, cvalue := C.CString(name), C.CString(value)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(cvalue))
	var msg [errBytes]C.char
	rc := int(C.edgestream_config_set(c.c, cname, cvalue, &msg[0], C.size_t(len(msg))))
	return cError("config set "+name, rc, C.GoString(&msg[0]))
}

// SetMap sets several options; the first error stops it (options before it stay set).
func (c *Config) SetMap(opts map[string]string) error {
	for name, value := range opts {
		if err := c.Set(name, value); err != nil {
			return err
		}
	}
	return nil
}

// LoadFile applies a YAML or JSON file of options (keys as the option names; lists replace what was
// set before; ../FLAGS.md). Errors carry the library's message, which names the file, line and key.
func (c *Config) LoadFile(path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c == nil {
		return ErrClosed
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [errBytes]C.char
	rc := int(C.edgestream_config_load_file(c.c, cpath, &msg[0], C.size_t(len(msg))))
	return cError("config load "+path, rc, C.GoString(&msg[0]))
}

// Check checks what New would, without starting anything: the URLs, the certificate, key and
// CA files (loaded, each key matching its certificate), the node identity, the local ports,
// and that admin-listen is an address of this host (as the daemon's --check-config does). A
// node that joins with join-token is not joined. Errors: an *Error with the library's reason.
func (c *Config) Check() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c == nil {
		return ErrClosed
	}
	var msg [errBytes]C.char
	rc := int(C.edgestream_config_check(c.c, &msg[0], C.size_t(len(msg))))
	return cError("config check", rc, C.GoString(&msg[0]))
}

// Close frees the Config. Tunnels made from it keep their own copy. Closing twice is fine.
func (c *Config) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c != nil {
		C.edgestream_config_free(c.c)
		c.c = nil
		runtime.SetFinalizer(c, nil)
	}
	return nil
}
