package main

import (
	"flag"
	"io"
	"testing"

	"github.com/policyrouter/policyrouter/app"
)

// serve's flags read POLICYROUTER_<NAME>: the replica token file too,
// and a command-line flag wins over it.
func TestReplicaTokenFileFromTheEnvironment(t *testing.T) {
	parse := func(args ...string) app.Config {
		cfg := app.DefaultConfig()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg.RegisterFlags(fs)
		if err := parseFlags(fs, args); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	t.Setenv("POLICYROUTER_REPLICA_TOKEN_FILE", "/run/secrets/replica-token")
	if got := parse().ReplicaTokenFile; got != "/run/secrets/replica-token" {
		t.Errorf("ReplicaTokenFile from the environment = %q", got)
	}
	if got := parse("--replica-token-file", "/etc/token").ReplicaTokenFile; got != "/etc/token" {
		t.Errorf("ReplicaTokenFile with the flag too = %q; want the flag's", got)
	}
}
