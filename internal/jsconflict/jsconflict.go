// Package jsconflict recognises a lost compare-and-set on JetStream, the one check every
// optimistic writer in agentbus retries on.
//
// The server reports such a loss as "wrong last sequence", with error code 10071 on a
// single-replica stream and 10164 on a replicated (R>1) one. nats.go maps both codes for KV
// writes (Create wraps jetstream.ErrKeyExists, Update/Delete/Purge wrap
// jetstream.ErrKeyRevisionMismatch) but has no sentinel for a stream publish with an
// expected last (subject) sequence, so the codes are matched here, once.
package jsconflict

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Is reports whether err is a lost compare-and-set: a KV Create of a key that exists, a KV
// Update, Delete or Purge at a stale revision, or a publish whose expected last (subject)
// sequence did not match, on single-server and replicated streams alike. The writer should
// reload and retry (or, when it holds a lease or a fence, stop acting).
func Is(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}
