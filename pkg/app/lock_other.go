//go:build !unix

package app

// lockFile is a no-op where flock is not available: the data-directory lock is a Unix
// feature (agentbus's images and CI run on Linux).
func lockFile(string) (func(), error) { return func() {}, nil }
