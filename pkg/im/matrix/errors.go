package matrix

import "errors"

// ErrTokenMoved: another replica wrote the since token after this one read it. This replica
// no longer holds the connection and must stop syncing (the sync loop returns it, and
// im.Hold competes for the connection again).
var ErrTokenMoved = errors.New("matrix: since token moved by another replica")
