package compaction

import "errors"

var (
	// ErrNothingToCompact: the context has nothing that can be summarized (it is all within
	// the keep budget, or one record the cut may not split). The caller goes on uncompacted,
	// or tells the user that there is nothing to compact.
	ErrNothingToCompact = errors.New("compaction: nothing to compact")
	// ErrSummaryFailed: the summarizing model call failed or returned no text. Nothing should be
	// committed; the caller may retry later (the context is unchanged).
	ErrSummaryFailed = errors.New("compaction: summary failed")
)
