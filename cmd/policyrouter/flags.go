package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// parseFlags parses args into fs after taking defaults from the
// environment: flag --poll-interval reads POLICYROUTER_POLL_INTERVAL.
// Command-line flags win over the environment.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := "POLICYROUTER_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				// The value is not quoted: it may be a secret.
				envErr = fmt.Errorf("environment %s: %w", name, err)
			}
		}
	})
	if envErr != nil {
		return envErr
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q (flags go before nothing else; see %s -h)", fs.Name(), fs.Arg(0), fs.Name())
	}
	return nil
}
