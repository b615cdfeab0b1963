package schedule

import "errors"

var (
	// ErrNotFound: there is no such schedule or task in the session. Tell the user; nothing
	// to retry.
	ErrNotFound = errors.New("schedule: not found")
	// ErrBadSchedule: the schedule expression or time is unusable (in the past, too far ahead,
	// not a duration or cron expression). Fix the input.
	ErrBadSchedule = errors.New("schedule: bad schedule")
	// ErrConflict: another writer changed the record first and retries ran out. Retry later.
	ErrConflict = errors.New("schedule: concurrent update")
)
