//go:build lsan

package edgestream

// Built with -tags lsan in an AddressSanitizer build (CGO_CFLAGS/CGO_LDFLAGS with
// -fsanitize=address): Go programs end with exit_group, never through libc's exit, so
// LeakSanitizer's check at exit never runs; the tests call it themselves.

/*
#include <sanitizer/lsan_interface.h>
*/
import "C"

// leakCheck runs LeakSanitizer now; true if it found leaks (it prints them).
func leakCheck() bool { return C.__lsan_do_recoverable_leak_check() != 0 }
