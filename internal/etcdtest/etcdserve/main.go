// Command etcdserve runs the tests' embedded single-member etcd (package
// etcdtest) as a process, for tests outside Go (the Python client's run
// of the README's several-routers example): it prints the client URL on
// one line once etcd is ready, serves until SIGTERM or SIGINT, and then
// removes its data.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/policyrouter/policyrouter/internal/etcdtest"
)

func main() {
	s, err := etcdtest.StartServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdserve:", err)
		os.Exit(1)
	}
	fmt.Println(s.Endpoint)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	s.Stop()
}
