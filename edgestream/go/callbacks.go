package edgestream

// The trampolines libedgestream's callbacks reach through shim.c. They run on the loop thread
// (a Tunnel's owner thread, inside edgestream_run or edgestream_free): they copy the C strings,
// queue the event without blocking and return.

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
