//go:build !unix

package sandbox

import "context"

// Run is not available on this platform: process groups cannot be killed
// reliably, so the bash tool refuses to run rather than leak processes.
func Run(ctx context.Context, spec Spec) (Result, error) {
	return Result{}, ErrUnsupported
}

// ProtectProcess is a no-op on this platform.
func ProtectProcess() error { return nil }
