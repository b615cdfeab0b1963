//go:build unix

package main

import "golang.org/x/sys/unix"

// diskFree returns the bytes available to this user and the size of the file system holding path.
func diskFree(path string) (free, total uint64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	bs := uint64(st.Bsize) //nolint:unconvert // int64 on Linux, uint32 on Darwin
	return uint64(st.Bavail) * bs, uint64(st.Blocks) * bs, nil
}
