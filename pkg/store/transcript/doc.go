// Package transcript is the im_transcripts archive of the seed (ADR D4) on a bbolt file
// (transcripts.db): every inbound and outbound IM message as plain-text body + media JSON, for
// audit and for the chat_history tool's keyword search.
//
// # Layout
//
// One nested bucket per scene (platform + bot + scene id) under the top-level bucket "scenes",
// holding:
//
//	r  rows:     key = time ms (8 bytes BE) | row id (8 bytes BE) -> row JSON. Time-ordered, so
//	             "latest N" is a reverse cursor walk and retention deletes a key prefix.
//	i  ids:      key = direction byte | platform message id -> row key. Makes Insert idempotent
//	             on (message_id, direction).
//	s  segments: key = segment number (8 bytes BE) -> a search segment: the lower-cased bodies of
//	             up to segmentMaxRows rows in one contiguous, NUL-separated text blob plus the row
//	             keys and end offsets of each body.
//	n  the scene's row count (8 bytes BE).
//
// Search runs bytes.Index over the segments' blobs (newest segment first) instead of visiting
// each row: with no match, 100k rows of one scene are ~400 blobs read straight from the mmap, a
// few megabytes of SIMD substring search. Only matching rows are decoded. Matching is
// case-insensitive (both sides lower-cased with Unicode rules); a keyword is one substring
// (leading/trailing spaces trimmed).
//
// # Concurrency and crashes
//
// bbolt allows one writer and any number of concurrent readers (each Search is its own read
// transaction). Every write transaction is fsynced before Insert returns, so a process that dies
// without Close leaves a consistent file; the file lock (flock) dies with the process and the next
// Open succeeds. Only one process may have the file open at a time: Open waits up to
// Options.Timeout for the lock and then returns an error.
package transcript
