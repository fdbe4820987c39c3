//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package proxy

import "syscall"

// peekAlive reports whether the socket fd has nothing to read: a peek
// that would block. EOF or a byte already there both mean the idle
// connection cannot carry a request.
func peekAlive(fd uintptr) bool {
	var b [1]byte
	_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR
}
