package natsutil

import "errors"

// Sentinels. Match with errors.Is.
var (
	// ErrNotReady is returned when an embedded server does not accept connections in time.
	ErrNotReady = errors.New("nats server not ready")
	// ErrConfig wraps a connection configuration problem (no URL, unreadable nkey seed, ...).
	ErrConfig = errors.New("nats config")
	// ErrProvision wraps every provisioning failure; the message names the stream or bucket.
	ErrProvision = errors.New("provision")
)
