package turn

import "errors"

// ErrConfig is returned by New and Run for unusable Options; the message names the field. Fix
// the options (or the ai: keys pkg/app maps onto them): retrying does not help.
var ErrConfig = errors.New("turn: invalid options")
