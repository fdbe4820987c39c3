//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package proxy

// peekAlive cannot look at the socket here: the connection is taken as
// open, and one the server closed is retried (transport.RoundTrip).
func peekAlive(uintptr) bool { return true }
