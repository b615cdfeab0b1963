//go:build linux || darwin || freebsd

package main

import "syscall"

// diskFree returns the bytes available to this user and the size of the file system holding path.
func diskFree(path string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	bs := uint64(st.Bsize) // int64 on Linux, uint32 on Darwin
	return uint64(st.Bavail) * bs, uint64(st.Blocks) * bs, nil
}
