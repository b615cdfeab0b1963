package filepolicy

import "errors"

// Sentinel errors returned (wrapped, with the offending path) by
// [Policy.Resolve]. Match them with errors.Is.
var (
	// ErrEmptyPath: the path is empty or contains a NUL byte.
	ErrEmptyPath = errors.New("filepolicy: empty or invalid path")
	// ErrOutsideWorkspace: the path (after resolving "..", "~" and
	// symlinks) lies outside the workspace and the extra read roots.
	ErrOutsideWorkspace = errors.New("filepolicy: path outside the workspace")
	// ErrSymlinkEscape: the path is inside the workspace by name but a
	// symlink on the way leads outside it.
	ErrSymlinkEscape = errors.New("filepolicy: symlink leads outside the workspace")
	// ErrDevicePath: /dev, /proc, /sys, or a named pipe, socket or device node.
	ErrDevicePath = errors.New("filepolicy: device or kernel path")
	// ErrPrivatePath: a private location (credentials, keys, .env files,
	// the agentbus data directory, /etc/shadow, ...).
	ErrPrivatePath = errors.New("filepolicy: private path")
	// ErrReadOnly: a write to a location that is only readable (an extra
	// read root such as the skills directory).
	ErrReadOnly = errors.New("filepolicy: path is read-only")
	// ErrSymlinkLoop: too many symlinks while resolving.
	ErrSymlinkLoop = errors.New("filepolicy: too many levels of symbolic links")
)
