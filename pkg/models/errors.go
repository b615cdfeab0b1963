package models

import "errors"

// Sentinel errors of the package. Match with errors.Is.
var (
	// ErrDiscovery wraps every failure to list a provider's models (HTTP status, transport,
	// malformed body).
	ErrDiscovery = errors.New("model discovery failed")
	// ErrUnsupportedAPI: discovery does not know how to list models of the provider's api.
	ErrUnsupportedAPI = errors.New("model discovery not supported for api")
	// ErrNoCandidate: no model of the provider fits the requested kind (e.g. no vision model).
	ErrNoCandidate = errors.New("no suitable model")
	// ErrCacheMiss: the cache holds nothing for an alias.
	ErrCacheMiss = errors.New("model cache miss")
)
