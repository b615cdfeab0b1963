package execpolicy

import (
	"regexp"
	"sync"
)

// regexpCache memoizes compiled approval rules: Check runs for every bash
// call and the rules come from KV as strings.
type regexpCache struct {
	mu  sync.Mutex
	max int
	m   map[string]*regexp.Regexp
}

func newRegexpCache(max int) *regexpCache {
	return &regexpCache{max: max, m: map[string]*regexp.Regexp{}}
}

func (c *regexpCache) get(pat string) (*regexp.Regexp, error) {
	c.mu.Lock()
	re, ok := c.m[pat]
	c.mu.Unlock()
	if ok {
		return re, nil
	}
	re, err := regexp.Compile(pat)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[pat] = re
	c.mu.Unlock()
	return re, nil
}
