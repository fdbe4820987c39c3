// Command policyrouter is the policyrouter control plane.
//
//	policyrouter serve [flags]        run the router
//	policyrouter demo [flags]         run the router with simulated policies on two nodes
//	policyrouter status [flags]       print the policies of a running router
//	policyrouter token [flags]        mint a bearer token
//	policyrouter fake-policy [flags]  serve simulated policies' /idle endpoints
//	policyrouter version              print the version and build information (or --version, -v)
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

// usage lists the commands.
const usage = `policyrouter: the control plane that routes RL rollout requests to policy servers.

Usage: policyrouter COMMAND [flags]

Commands:
  serve        run the router
  demo         run the router with simulated policies and env workers
  status       print the policies of a running router (exit 1 on a failed policy or an unmet floor)
  token        mint a bearer token
  fake-policy  serve simulated policies
  version      print the version and build information (also --version, -v)
  help         print this help

Run "policyrouter COMMAND -h" for a command's flags.
`

// errUsage is a command line that names no command: usage was printed.
var errUsage = errors.New("no command given")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:])
	switch {
	case err == nil:
	case errors.Is(err, errAttention):
		stop()
		os.Exit(1)
	case errors.Is(err, flag.ErrHelp), errors.Is(err, errUsage):
		stop()
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "policyrouter:", err)
		stop()
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errUsage
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "serve":
		return serveCommand(ctx, args)
	case "demo":
		return demoCommand(ctx, args)
	case "status":
		return statusCommand(ctx, os.Stdout, args)
	case "token":
		return tokenCommand(args)
	case "fake-policy":
		return fakePolicyCommand(ctx, args)
	case "version", "--version", "-version", "-v":
		if len(args) > 0 {
			return fmt.Errorf("%s: unexpected argument %q", cmd, args[0])
		}
		return printVersion(os.Stdout)
	case "help", "-h", "-help", "--help":
		fmt.Print(usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q; commands: serve, demo, status, token, fake-policy, version (policyrouter help)", cmd)
	}
}
