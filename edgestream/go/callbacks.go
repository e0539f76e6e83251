package edgestream

// The trampolines libedgestream's callbacks reach through shim.c. The tunnel and certificate
// ones run on the loop thread (a Tunnel's owner thread, inside edgestream_run or
// edgestream_free), the log one on any thread that logs: they copy the C strings, queue the
// event without blocking and return.

/*
#include <stdint.h>
*/
import "C"

import "time"

//export goEdgestreamConnected
func goEdgestreamConnected(handle C.uintptr_t, node *C.char, extended C.int) {
	t := handles.get(uintptr(handle))
	if t == nil {
		return // the Tunnel is gone
	}
	t.post(Connected{Node: C.GoString(node), Extended: extended != 0})
}

//export goEdgestreamDisconnected
func goEdgestreamDisconnected(handle C.uintptr_t, err C.int, reason *C.char, retryInMs C.uint64_t) {
	t := handles.get(uintptr(handle))
	if t == nil {
		return
	}
	t.post(Disconnected{
		Err:     tunnelError(int(err), C.GoString(reason)),
		RetryIn: time.Duration(retryInMs) * time.Millisecond,
	})
}

//export goEdgestreamCert
func goEdgestreamCert(handle C.uintptr_t, result C.int, reason *C.char, path *C.char,
	notBefore C.int64_t, notAfter C.int64_t) {
	t := handles.get(uintptr(handle))
	if t == nil {
		return
	}
	ev := Certificate{Path: C.GoString(path)}
	if notBefore != 0 {
		ev.NotBefore = time.Unix(int64(notBefore), 0)
	}
	if notAfter != 0 {
		ev.NotAfter = time.Unix(int64(notAfter), 0)
	}
	if result < 0 {
		ev.Err = cError("certificate", int(result), C.GoString(reason))
	}
	t.post(ev)
}

// goEdgestreamLog runs on whichever thread logs (the loop's, a worker's), possibly several at
// once: it copies the line and queues it for the log hook's goroutine.
//
//export goEdgestreamLog
func goEdgestreamLog(level C.int, line *C.char) {
	logs.post(LogLevel(level), C.GoString(line))
}
