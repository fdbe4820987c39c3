// Command policyrouter is the policyrouter control plane.
//
//	policyrouter [serve] [flags]   run the router (the default command)
//	policyrouter demo [flags]      run the router with simulated policies on two nodes
//	policyrouter token [flags]     mint a bearer token
//	policyrouter fake-policy       serve simulated policies' /idle endpoints
//
// Every flag can also be set by an environment variable POLICYROUTER_<NAME>,
// e.g. POLICYROUTER_POLL_INTERVAL=200ms for --poll-interval.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "policyrouter:", err)
		}
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string) error {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		return serveCommand(ctx, args)
	case "demo":
		return demoCommand(ctx, args)
	case "token":
		return tokenCommand(args)
	case "fake-policy":
		return fakePolicyCommand(ctx, args)
	case "help":
		fmt.Println("usage: policyrouter [serve|demo|token|fake-policy] [flags]; policyrouter COMMAND -h for flags")
		return nil
	default:
		return fmt.Errorf("unknown command %q (want serve, demo, token or fake-policy)", cmd)
	}
}
