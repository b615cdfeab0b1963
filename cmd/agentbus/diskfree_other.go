//go:build !unix

package main

import "errors"

func diskFree(string) (free, total uint64, err error) {
	return 0, 0, errors.New("not supported on this system")
}
