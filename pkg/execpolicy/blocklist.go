package execpolicy

import "strings"

// Blocklist is the hard blocklist: commands denied in every mode (also in
// full) and never approvable, matched case-insensitively on the program's
// base name (so /usr/bin/sudo, \sudo, 'su'do and SUDO all match). They
// change identity or privileges (sudo, su, doas, pkexec, runuser, sg,
// newgrp, chroot, nsenter, unshare, setpriv, capsh), run strings as code in
// the current shell (eval, exec, source, ., alias, hash, enable,
// fc), trace or inject into processes (gdb, lldb, strace, ltrace), write
// raw disks or file systems (dd, mkfs*, mke2fs, mkswap, fdisk, sfdisk,
// cfdisk, gdisk, sgdisk, parted, wipefs, mount, umount, losetup, swapon,
// swapoff), load kernel code or stop the machine (insmod, rmmod, modprobe,
// kexec, sysctl, shutdown, reboot, halt, poweroff, init, telinit, systemctl),
// manage accounts (passwd, chpasswd, useradd, userdel, usermod, groupadd,
// visudo, chsh), or schedule commands outside the call (crontab, at,
// batch, systemd-run), or run programs in ways the policy cannot follow
// (script, expect, parallel, unbuffer, screen, tmux; zsh's autoload,
// zmodload, emulate -c, sched, zpty; and the program runners the policy
// does not unwrap: chrt, prlimit, numactl, setarch, valgrind, fakeroot,
// firejail, bwrap, proot, nsjail, xvfb-run, dbus-launch, ssh-agent, sshpass,
// ifne, chronic, faketime, torsocks, proxychains, rlwrap, gosu, su-exec,
// chpst, start-stop-daemon, daemonize, task spoolers, ...), or signal every
// process (killall5).
var Blocklist = []string{
	"sudo", "su", "doas", "pkexec", "runuser", "sg", "newgrp", "chroot", "nsenter", "unshare", "setpriv", "capsh", "setcap",
	"eval", "exec", "source", ".", "alias", "unalias", "hash", "enable", "fc",
	"gdb", "lldb", "strace", "ltrace", "ptrace",
	"dd", "mkfs", "mke2fs", "mkswap", "fdisk", "sfdisk", "cfdisk", "gdisk", "sgdisk", "parted", "wipefs", "mount", "umount", "losetup", "swapon", "swapoff", "debugfs",
	"insmod", "rmmod", "modprobe", "kexec", "sysctl", "shutdown", "reboot", "halt", "poweroff", "init", "telinit", "systemctl",
	"passwd", "chpasswd", "useradd", "userdel", "usermod", "groupadd", "visudo", "chsh",
	"crontab", "at", "batch", "systemd-run",
	"script", "expect", "parallel", "unbuffer", "screen", "tmux",
	"autoload", "zmodload", "emulate", "sched", "zpty", "killall5",
	"chrt", "prlimit", "numactl", "setarch", "linux32", "linux64", "valgrind", "fakeroot", "fakechroot", "firejail", "bwrap",
	"proot", "nsjail", "schroot", "systemd-nspawn", "machinectl", "runcon", "cgexec", "xvfb-run", "dbus-launch",
	"dbus-run-session", "ssh-agent", "sshpass", "ifne", "chronic", "catchsegv", "faketime", "torsocks", "proxychains",
	"proxychains4", "rlwrap", "sem", "gosu", "su-exec", "setuidgid", "chpst", "softlimit", "envdir", "start-stop-daemon",
	"daemonize", "daemon", "tsp", "nq", "pueue", "entr", "watchexec", "sudoedit",
}

var blockSet = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range Blocklist {
		m[c] = true
	}
	return m
}()

// isBlocked reports whether a bare program name is hard-blocked.
func isBlocked(name string) bool {
	n := strings.ToLower(name)
	if blockSet[n] {
		return true
	}
	// mkfs.ext4, mkfs.vfat, mkdosfs, fsck is fine, mkfs* is not.
	return strings.HasPrefix(n, "mkfs") || strings.HasPrefix(n, "mkdosfs")
}
