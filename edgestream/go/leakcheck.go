//go:build !lsan

package edgestream

// leakCheck is a no-op without LeakSanitizer (see leakcheck_lsan.go).
func leakCheck() bool { return false }
